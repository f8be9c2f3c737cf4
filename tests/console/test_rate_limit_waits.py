"""The console tells a person why a run waits on a rate limit, and until when."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.console.test_console import create, open_page
from tests.support.processes import Processes


def test_a_rate_limited_run_shows_its_key_in_the_wait_banner_and_the_timeline(
    processes: Processes, context: BrowserContext, artifacts: Path
) -> None:
    _, url = processes.api()
    processes.worker()
    spec = {"limit": 1, "period_s": 30}
    assert httpx.put(f"{url}/rate-limits/slow", json=spec, timeout=30).status_code == 201
    first = create(url, "test.rate_call", {"key": "slow"})
    first_page = open_page(context, f"{url}/#/runs/{first}")
    expect(first_page.locator("h1 .badge")).to_have_text("succeeded")  # it took the token
    second = create(url, "test.rate_call", {"key": "slow"})
    page = open_page(context, f"{url}/#/runs/{second}")
    banner = page.locator(".wait-banner")
    expect(banner).to_contain_text("Waiting on rate limit slow")
    expect(banner).to_contain_text("waiting for its token until")
    expect(page.locator('.event[data-type="wait"]')).to_contain_text("rate-limited on slow")
    page.screenshot(path=artifacts / "run-view-rate-limited.png", full_page=True)
    httpx.post(f"{url}/runs/{second}/cancel", timeout=30)
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    expect(banner).to_be_hidden()
