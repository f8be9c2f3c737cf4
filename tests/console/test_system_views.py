"""The console's system views in a real Chromium against a real API, workers and Redis.

Queues with their last hour as charts, runs found by metadata and by id and
cancelled in bulk, a run's attempts as a history with a duration across them,
and a worker drained from the page. Each test waits for what the page shows,
never for a fixed time, and never reloads: the views update by themselves.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, Route, expect

from tests.console.test_console import create, open_page
from tests.support.processes import Processes


def create_with(url: str, body: dict[str, Any]) -> str:
    response = httpx.post(f"{url}/runs", json=body, timeout=30)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


def wait_status(url: str, run_id: str, status: str, timeout_s: float = 60) -> None:
    """Poll the API until the run is in ``status``."""
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        seen = httpx.get(f"{url}/runs/{run_id}", timeout=30).json()["status"]
        if seen == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"{run_id} is {seen}, not {status}, after {timeout_s} s")


def test_the_queues_view_counts_and_charts_the_last_hour_live(
    processes: Processes, context: BrowserContext, artifacts: Path
) -> None:
    _, url = processes.api()
    owner = processes.worker("--no-reconciler")
    done = [create(url, "demo.echo", {"message": str(i)}) for i in range(3)]
    failed = create(url, "demo.fail", {"message": "boom"})
    for run_id in done:
        wait_status(url, run_id, "succeeded")
    wait_status(url, failed, "failed")
    held = create_with(
        url, {"handler": "demo.sleep", "input": {"seconds": 120}, "on_lease_expired": "orphan"}
    )
    wait_status(url, held, "running")
    processes.worker()  # a survivor whose reconciler orphans the killed worker's run
    owner.signal(signal.SIGKILL)
    wait_status(url, held, "orphaned")

    page = open_page(context, f"{url}/#/queues")
    row = page.locator('tr[data-queue="default"]')
    expect(row).to_be_visible()
    expect(row.locator("svg.chart-finished")).to_have_attribute("data-total", "5")
    expect(row.locator("svg.chart-orphans")).to_have_attribute("data-total", "1")
    expect(row.locator("svg.chart-failed")).to_have_attribute("data-total", "1")
    expect(row.locator("svg.chart-failed")).to_have_attribute(
        "aria-label", re.compile(r"Failed / min, last 60 min: 1 in all")
    )
    # live: work queued on a queue nobody serves shows up without a reload
    assert httpx.put(f"{url}/queues/later", timeout=30).status_code == 201
    create_with(url, {"handler": "demo.echo", "input": {}, "queue": "later"})
    later = page.locator('tr[data-queue="later"]')
    expect(later.locator('[data-field="ready"]')).to_have_text("1")
    expect(later.locator('[data-field="oldest"]')).not_to_have_text("—")
    expect(page.get_by_role("link", name="Queues")).to_have_attribute("aria-current", "page")
    # docs/console-queues.png is this picture
    page.screenshot(path=artifacts / "console-queues.png", full_page=True)


def test_runs_are_found_by_metadata_and_id_and_cancelled_and_deleted_in_bulk(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()  # no worker: every run stays queued
    acme = [
        create_with(url, {"handler": "demo.echo", "input": {}, "metadata": {"tenant": "acme"}})
        for _ in range(2)
    ]
    other = create_with(
        url, {"handler": "demo.echo", "input": {}, "metadata": {"tenant": "globex"}}
    )
    page = context.new_page()
    held: list[Route] = []
    page.route(re.compile(r".*/runs\?.*"), lambda route: held.append(route))
    page.goto(f"{url}/#/runs")
    expect(page.locator("td.loading")).to_have_text("Loading runs…")  # not an empty table
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # poll: the page asks for the list once its stream is ready
    assert held, "the list request was never sent"
    expect(page.locator("td.loading")).to_be_visible()  # still loading while it is held
    for route in held:
        route.continue_()
    page.unroute(re.compile(r".*/runs\?.*"))
    expect(page.locator(f'tr[data-run-id="{other}"]')).to_be_visible()

    page.get_by_label("Metadata").fill("tenant=acme")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("tr[data-run-id]")).to_have_count(2)
    for run_id in acme:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()
    page.get_by_label("Select every run shown").check()
    page.get_by_role("button", name="Cancel 2 selected…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel 2 runs?")
    dialog.get_by_role("button", name="Cancel runs").click()
    expect(page.get_by_text("Cancelled 2.")).to_be_visible()
    for run_id in acme:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_have_attribute(
            "data-status", "cancelled"
        )
    assert httpx.get(f"{url}/runs/{other}", timeout=30).json()["status"] == "queued"
    # now finished, the same two are deleted in one go; the queued one is untouched
    page.get_by_label("Select every run shown").check()
    expect(page.get_by_role("button", name="Cancel selected…")).to_be_disabled()
    page.get_by_role("button", name="Delete 2 selected…").click()
    expect(dialog).to_contain_text("Delete 2 runs?")
    dialog.get_by_role("button", name="Delete runs").click()
    expect(page.get_by_text("Deleted 2.")).to_be_visible()
    expect(page.locator("tr[data-run-id]")).to_have_count(0)
    for run_id in acme:
        assert httpx.get(f"{url}/runs/{run_id}", timeout=30).status_code == 404

    page.get_by_label("Metadata").fill("not a pair")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("main .problem")).to_contain_text("key=value")
    page.get_by_label("Metadata").fill("")
    page.get_by_label("Run id").fill(other)
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("h1")).to_contain_text(other)


def test_the_run_view_lists_attempts_and_times_the_whole_run(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    first = processes.worker("--no-reconciler")
    run_id = create_with(
        url,
        {
            "handler": "test.record",
            "input": {"seconds": 2},
            "max_attempts": 2,
            "on_lease_expired": "retry",
        },
    )
    page = open_page(context, f"{url}/#/runs/{run_id}")
    attempts = page.locator("section.attempts tbody tr")
    expect(attempts).to_have_count(1)
    expect(attempts.nth(0)).to_have_attribute("data-ended", "running")
    first.signal(signal.SIGKILL)  # the first attempt's worker dies mid-run
    processes.worker()  # takes it over once the lease runs out
    expect(page.locator("h1 .badge")).to_have_text("succeeded")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_have_attribute("data-ended", "lease_expired")
    expect(attempts.nth(1)).to_have_attribute("data-ended", "succeeded")
    run = httpx.get(f"{url}/runs/{run_id}", timeout=30).json()
    assert run["first_started_at"] < run["started_at"]
    duration = page.locator("dt:text-is('Duration') + dd")
    # the first start to the end: the lost attempt, the lease's expiry and the 2 s retry
    expect(duration).to_have_text(re.compile(r"^\d+\.\d s$"))
    seconds = float(duration.inner_text().split()[0])
    assert seconds >= 2.0, duration.inner_text()


def test_a_worker_is_drained_from_the_workers_view(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    worker = processes.worker()
    page = open_page(context, f"{url}/#/workers")
    row = page.locator("tr[data-worker-id]")
    expect(row).to_have_attribute("data-health", "live")
    row.get_by_role("button", name="Drain…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Drain w-")
    dialog.get_by_role("button", name="Drain worker").click()
    assert worker.wait(30) == 0  # it drained and exited, as on SIGTERM
    expect(page.locator("tr[data-worker-id]")).to_have_count(0)
    assert "drain requested" in worker.log()


def test_the_queues_view_lists_schedules_with_their_next_fire_time(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    body = {
        "id": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "run": {"handler": "demo.echo", "input": {"message": "report"}},
    }
    created = httpx.post(f"{url}/schedules", json=body, timeout=30)
    assert created.status_code == 201, created.text
    next_fire = created.json()["next_fire_at"]
    page = open_page(context, f"{url}/#/queues")
    row = page.locator('tr[data-schedule="nightly"]')
    expect(row).to_be_visible()
    expect(row.locator('[data-field="next-fire"]')).to_have_text(next_fire)
    expect(row).to_contain_text("30 2 * * * (Europe/Berlin)")
    assert httpx.post(f"{url}/schedules/nightly/pause", timeout=30).status_code == 200
    expect(row.locator('[data-field="next-fire"]')).to_have_text("paused")  # live, no reload


def test_the_workers_view_shows_each_build_and_when_it_is_drained(
    processes: Processes, context: BrowserContext
) -> None:
    """A pinned run parked under build v1 keeps v1 in use; once it ends, v1 is drained."""
    _, url = processes.api()
    processes.worker(LEASEHOLD_BUILD_ID="v1", LEASEHOLD_TEST_STEPS="w:go")
    run_id = create_with(url, {"handler": "test.drift_steps", "input": {}, "versioning": "pinned"})
    wait_status(url, run_id, "waiting")
    page = open_page(context, f"{url}/#/workers")
    expect(page.locator("tr[data-worker-id] td.mono").nth(1)).to_have_text("v1")
    build = page.locator('tr[data-build-id="v1"]')
    expect(build).to_have_attribute("data-drained", "false")
    expect(build).to_contain_text("in use")
    signalled = httpx.post(f"{url}/runs/{run_id}/signals/go", json={"payload": 1}, timeout=30)
    assert signalled.status_code in (200, 202)
    wait_status(url, run_id, "succeeded")
    expect(build).to_have_attribute("data-drained", "true")
