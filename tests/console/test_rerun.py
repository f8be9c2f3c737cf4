"""Re-running an ended run from its page: confirm, land on the new run, links both ways."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.console.test_accessibility import violations
from tests.console.test_console import create, open_page
from tests.support.processes import Processes


def test_rerun_a_cancelled_run_from_its_page_and_follow_the_links(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    ended = create(url, "demo.echo", {"message": "again"})  # no worker: cancelled queued
    assert httpx.post(f"{url}/runs/{ended}/cancel", timeout=30).status_code == 202
    page = open_page(context, f"{url}/#/runs/{ended}")
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    page.get_by_role("button", name="Re-run…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Re-run {ended}?")
    assert violations(page) == []
    dialog.get_by_role("button", name="Re-run").click()
    expect(page.locator("h1 .badge")).to_have_text("queued")
    new_id = httpx.get(f"{url}/runs/{ended}", timeout=30).json()["retried_by"]
    assert new_id and page.url.endswith(f"#/runs/{new_id}")
    expect(page.get_by_role("link", name=ended)).to_be_visible()  # "Re-run of"
    page.get_by_role("link", name=ended).click()
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    expect(page.get_by_role("link", name=new_id)).to_be_visible()  # "Re-run as"
    expect(page.get_by_role("button", name="Re-run…")).to_have_count(0)  # once at a time


def test_rerun_selected_runs_from_the_list_re_runs_only_the_ended_ones(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()  # no worker: runs stay queued until cancelled
    ended = [create(url, "demo.echo", {"n": n}) for n in range(2)]
    for run_id in ended:
        assert httpx.post(f"{url}/runs/{run_id}/cancel", timeout=30).status_code == 202
    queued = create(url, "demo.echo", {"n": 9})
    page = open_page(context, f"{url}/#/runs")
    for run_id in [*ended, queued]:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()
    page.get_by_label("Select every run shown").check()
    page.get_by_role("button", name="Re-run 2 selected…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Re-run 2 runs?")
    assert violations(page) == []
    dialog.get_by_role("button", name="Re-run runs").click()
    expect(page.get_by_text("Re-ran 2.")).to_be_visible()
    for run_id in ended:
        assert httpx.get(f"{url}/runs/{run_id}", timeout=30).json()["retried_by"]
    assert httpx.get(f"{url}/runs/{queued}", timeout=30).json()["retried_by"] is None
    expect(page.locator("tr[data-run-id]")).to_have_count(5)  # the two re-runs joined
