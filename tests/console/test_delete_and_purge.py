"""Deleting a run and purging finished runs from the console, with confirmation.

A real Chromium against a real API, worker and Redis; the outcome is checked both
on the page and through the API.
"""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.console.test_accessibility import violations
from tests.console.test_console import create, open_page
from tests.support.processes import Processes


def status_of(url: str, run_id: str) -> int:
    return httpx.get(f"{url}/runs/{run_id}", timeout=30).status_code


def test_delete_a_finished_run_from_its_page_after_confirming(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker()
    finished = create(url, "demo.echo", {"message": "bye"})
    page = open_page(context, f"{url}/#/runs/{finished}")
    expect(page.locator("h1 .badge")).to_have_text("succeeded")
    page.get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Delete {finished}?")
    assert violations(page) == []
    dialog.get_by_role("button", name="Back").click()  # backing out deletes nothing
    expect(dialog).to_be_hidden()
    assert status_of(url, finished) == 200

    page.get_by_role("button", name="Delete…").click()
    dialog.get_by_role("button", name="Delete run").click()
    expect(page).to_have_url(f"{url}/#/runs")
    assert status_of(url, finished) == 404


def test_no_delete_button_on_a_run_that_has_not_finished(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    queued = create(url, "demo.echo", {})  # no worker: it stays queued
    page = open_page(context, f"{url}/#/runs/{queued}")
    expect(page.locator("h1 .badge")).to_have_text("queued")
    expect(page.get_by_role("button", name="Cancel…")).to_be_visible()
    expect(page.get_by_role("button", name="Delete…")).to_have_count(0)
    assert status_of(url, queued) == 200, "the run is still there"


def test_purge_the_finished_runs_of_the_filter_and_keep_the_running_one(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker()
    sleeper = create(url, "demo.sleep", {"seconds": 120})
    echoes = [create(url, "demo.echo", {"n": n}) for n in range(3)]
    page = open_page(context, f"{url}/#/runs")
    for run_id in echoes:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_have_attribute(
            "data-status", "succeeded"
        )
    expect(page.locator(f'tr[data-run-id="{sleeper}"]')).to_have_attribute("data-status", "running")
    page.get_by_role("button", name="Purge finished runs…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Queued, running and parked runs are never touched")
    assert violations(page) == []
    dialog.get_by_role("button", name="Purge runs").click()
    expect(page.get_by_text("Purged 3 finished runs.")).to_be_visible()
    for run_id in echoes:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_have_count(0)
        assert status_of(url, run_id) == 404
    assert httpx.get(f"{url}/runs/{sleeper}", timeout=30).json()["status"] == "running"

    # a filter on a status that is not finished offers no purge
    page.goto(f"{url}/#/runs?status=running")
    expect(page.locator(f'tr[data-run-id="{sleeper}"]')).to_be_visible()
    expect(page.get_by_role("button", name="Purge finished runs…")).to_have_count(0)
