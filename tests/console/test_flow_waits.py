"""The console says why a queued run waits: a concurrency key at its limit."""

from __future__ import annotations

import time

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.console.test_console import open_page
from tests.support.processes import Processes


def test_a_run_waiting_for_its_keys_slot_says_so_on_its_page(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    limits = httpx.put(f"{url}/queues/default/limits", json={"default_key": 1}, timeout=30)
    assert limits.status_code == 200
    body = {"handler": "demo.sleep", "input": {"seconds": 30}, "concurrency_key": "tenant-a"}
    ids = [httpx.post(f"{url}/runs", json=body, timeout=30).json()["id"] for _ in range(2)]
    processes.worker()  # starts the first; the second's lane waits for its slot
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/runs/{ids[1]}", timeout=30).json()["blocked_on"] is None:
        assert time.monotonic() < deadline, "the second run never waited for its slot"
        time.sleep(0.1)  # polling for the outcome, not a fixed wait
    page = open_page(context, f"{url}/#/runs/{ids[1]}")
    banner = page.locator(".wait-banner")
    expect(banner).to_contain_text("concurrency key tenant-a is at its limit of 1", timeout=30_000)
    expect(page.locator("dl.fields")).to_contain_text("a slot of concurrency key tenant-a")
