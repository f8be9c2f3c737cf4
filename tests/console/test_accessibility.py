"""The console's views checked by axe-core (WCAG 2.1 A and AA rules) in a real Chromium.

The issue asks for accessible markup (labels, roles, keyboard focus); these
tests hold every view to it automatically, on the state a person would see: the
runs table with runs in it, a run page mid-wait (banner up), the workers view,
and a confirmation dialog open. ``axe-playwright-python`` ships axe-core and
injects it into the page.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.test_console import KEY, create, create_hung_tool_run, open_page
from tests.support.memory import SmallRedis
from tests.support.processes import Processes, base_env

# the WCAG 2.0/2.1 A and AA rule sets: what "accessible" is measured against
WCAG_AA = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}


def violations(page: Page) -> list[str]:
    """axe-core's WCAG A/AA violations on the page as it is now, one readable line each."""
    results = Axe().run(page, options={**WCAG_AA, "resultTypes": ["violations"]})
    found: list[dict[str, Any]] = results.response["violations"]
    return [
        f"{item['id']} ({item['impact']}): {item['help']} at "
        + "; ".join(", ".join(node["target"]) for node in item["nodes"][:5])
        for item in found
    ]


def test_every_view_passes_the_wcag_a_and_aa_rules_of_axe(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    # a judge that thinks for 2 s before each RENEW keeps a wait banner up
    processes.worker(
        LEASEHOLD_WATCHDOG_EVALUATOR="tests.support.judges:slow_renew",
        LEASEHOLD_WATCHDOG_FREE_RENEWALS="0",
    )
    finished = create(url, "demo.echo", {"message": "hello"})
    waiting = create_hung_tool_run(url, tool_lease_s=1.0)

    runs = open_page(context, f"{url}/#/runs")
    expect(runs.locator(f'tr[data-run-id="{finished}"]')).to_have_attribute(
        "data-status", "succeeded"
    )
    assert violations(runs) == []

    run = open_page(context, f"{url}/#/runs/{waiting}")
    expect(run.locator(".wait-banner")).to_be_visible()
    assert violations(run) == []
    run.get_by_role("button", name="Cancel…").click()
    expect(run.get_by_role("dialog")).to_contain_text(f"Cancel {waiting}?")
    assert violations(run) == []

    workers = open_page(context, f"{url}/#/workers")
    expect(workers.locator("tr[data-worker-id]")).to_have_count(1)
    assert violations(workers) == []


def test_the_key_prompt_passes_the_wcag_a_and_aa_rules_of_axe(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    page = open_page(context, f"{url}/")
    login = page.get_by_role("dialog")
    expect(login).to_contain_text("This API needs a key")
    assert violations(page) == []
    login.get_by_label("API key").fill("not-the-key-0123456789")
    login.get_by_role("button", name="Use key").click()
    expect(login).to_contain_text("did not accept that key")  # the refusal, shown
    assert violations(page) == []


def refused_within(url: str, *, timeout_s: float) -> bool:
    """Poll creates until one is refused (the API trusts a memory reading for a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = {"handler": "demo.echo", "input": {}}
        if httpx.post(f"{url}/runs", json=body, timeout=30).status_code == 503:
            return True
        time.sleep(0.1)
    return False


def test_the_console_shows_a_banner_while_creates_are_refused_and_it_passes_axe(
    small_redis: SmallRedis, prefix: str, tmp_path: Path, context: BrowserContext
) -> None:
    small_redis.allow(4_000_000)
    procs = Processes(base_env(small_redis.url, prefix, lease_ttl_s=1.0), tmp_path)
    try:
        _, url = procs.api(LEASEHOLD_MEMORY_HIGH_WATER="0.6")
        page = open_page(context, f"{url}/#/runs")
        banner = page.locator("#memory-banner")
        expect(page.locator("main")).to_be_visible()
        expect(banner).to_be_hidden()
        # Redis memory now at ~80 % of maxmemory, well past the 60 % mark
        small_redis.set_max(int(small_redis.used_bytes() / 0.8))
        assert refused_within(url, timeout_s=30), "creates still accepted"
        expect(banner).to_be_visible()  # by itself, within a poll
        expect(banner).to_contain_text("New runs are refused")
        expect(banner).to_have_attribute("role", "status")
        assert violations(page) == []
        small_redis.set_max(0)  # memory frees: the banner goes away by itself
        expect(banner).to_be_hidden()
    finally:
        procs.reap()


def test_the_queues_view_bulk_cancel_attempts_and_drain_pass_axe(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker()
    finished = create(url, "demo.echo", {"message": "hello"})
    running = create(url, "test.record", {"seconds": 60})

    queues = open_page(context, f"{url}/#/queues")
    expect(queues.locator('tr[data-queue="default"] svg.chart-finished')).to_be_visible()
    assert violations(queues) == []

    runs = open_page(context, f"{url}/#/runs")
    expect(runs.locator(f'tr[data-run-id="{finished}"]')).to_have_attribute(
        "data-status", "succeeded"
    )
    runs.get_by_label(f"Select {running}").check()
    runs.get_by_role("button", name="Cancel 1 selected…").click()
    expect(runs.get_by_role("dialog")).to_contain_text("Cancel 1 run?")
    assert violations(runs) == []
    runs.get_by_role("button", name="Back").click()

    run = open_page(context, f"{url}/#/runs/{running}")
    expect(run.locator("section.attempts tbody tr")).to_have_count(1)
    assert violations(run) == []

    workers = open_page(context, f"{url}/#/workers")
    workers.get_by_role("button", name="Drain…").click()
    expect(workers.get_by_role("dialog")).to_contain_text("Drain w-")
    assert violations(workers) == []
    workers.get_by_role("button", name="Back").click()
