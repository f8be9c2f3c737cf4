"""The console in a real Chromium against a real API, workers and Redis.

Each test watches the page the way a person would: it waits for what the page
shows (Playwright's auto-waiting, generous timeouts), never for a fixed time, and
never reloads a page to see a change: the views must update by themselves.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, Page, expect

from tests.support.processes import Processes

KEY = "console-test-key-0123456789"


def create(url: str, handler: str, payload: dict[str, Any], **headers: str) -> str:
    response = httpx.post(
        f"{url}/runs", json={"handler": handler, "input": payload}, headers=headers, timeout=30
    )
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


def create_hung_tool_run(url: str, *, tool_lease_s: float) -> str:
    """A ``demo.agent`` run whose model streams a few tokens and whose tool then hangs."""
    return create(
        url,
        "demo.agent",
        {
            "model": {"first_token_s": 0, "gap_s": 0.02, "tokens": 12},
            "tools": [{"name": "crm.search", "hang": True}],
            "tool_lease_s": tool_lease_s,
        },
    )


def open_page(context: BrowserContext, url: str) -> Page:
    page = context.new_page()
    page.goto(url)
    return page


def last_event_is(page: Page, event_type: str, *, banner_hidden: bool) -> None:
    """Wait for a moment where ``event_type`` is the newest event and the banner is so.

    Checked in one step inside the page, so no later event can slip in between
    the two observations.
    """
    page.wait_for_function(
        """([type, hidden]) => {
            const events = document.querySelectorAll(".timeline .event");
            const last = events[events.length - 1];
            const banner = document.querySelector(".wait-banner");
            return last && last.dataset.type === type && banner && banner.hidden === hidden;
        }""",
        arg=[event_type, banner_hidden],
    )


def test_a_hung_tool_raises_the_wait_banner_then_the_verdict_clears_it(
    processes: Processes, context: BrowserContext, artifacts: Path
) -> None:
    _, url = processes.api()
    processes.worker(
        LEASEHOLD_WATCHDOG_EVALUATOR="tests.support.judges:slow_renew",
        LEASEHOLD_WATCHDOG_FREE_RENEWALS="0",
        LEASEHOLD_WATCHDOG_MAX_RENEWALS="2",
    )
    run_id = create_hung_tool_run(url, tool_lease_s=1.5)
    page = open_page(context, f"{url}/#/runs/{run_id}")
    banner = page.locator(".wait-banner")
    expect(banner).to_contain_text("Waiting on tool_call crm.search")
    expect(banner).to_contain_text("renewals so far")
    expect(page.locator(".event-tokens .tokens")).to_contain_text("lease")  # flowing text
    page.screenshot(path=artifacts / "run-view-waiting.png", full_page=True)
    # the judge answers RENEW: the verdict is in the timeline and the banner is gone
    last_event_is(page, "verdict", banner_hidden=True)
    expect(page.locator('.event[data-type="verdict"]').first).to_contain_text("RENEW")
    # past max_renewals the watchdog intervenes and the run ends: no banner left behind
    expect(page.locator('.event[data-type="failed"]')).to_contain_text("operation_intervened")
    expect(page.locator('.event[data-verdict="INTERVENE"]')).to_have_count(1)
    expect(banner).to_be_hidden()
    expect(page.locator("h1 .badge")).to_have_text("failed")


def test_a_killed_worker_shows_orphaned_with_its_story_in_both_views(
    processes: Processes, context: BrowserContext, artifacts: Path
) -> None:
    _, url = processes.api()
    # a longer lease than the API's: its advertisement outlives its silence for a while
    owner = processes.worker("--no-reconciler", LEASEHOLD_LEASE_TTL_S="3")
    runs = open_page(context, f"{url}/#/runs")
    expect(runs.locator(".connection")).to_have_text("live")
    quick = create(url, "demo.sleep", {"seconds": 0.2})
    expect(runs.locator(f'tr[data-run-id="{quick}"]')).to_have_attribute("data-status", "succeeded")
    run_id = create(url, "demo.sleep", {"seconds": 120})
    row = runs.locator(f'tr[data-run-id="{run_id}"]')
    expect(row).to_have_attribute("data-status", "running")  # appeared and moved, live
    run = open_page(context, f"{url}/#/runs/{run_id}")
    expect(run.locator("h1 .badge")).to_have_text("running")
    owner_id = httpx.get(f"{url}/runs/{run_id}", timeout=30).json()["owner_id"]
    workers = open_page(context, f"{url}/#/workers")
    worker = workers.locator(f'tr[data-worker-id="{owner_id}"]')
    expect(worker).to_have_attribute("data-health", "live")
    processes.spawn("reconciler", ["reconciler"])
    owner.signal(signal.SIGKILL)
    expect(worker).to_have_attribute("data-health", re.compile("stale|expired"))
    story = "stopped renewing at"
    expect(row).to_have_attribute("data-status", "orphaned")
    expect(row.locator(".reason")).to_contain_text(re.compile(r"^executor lease expired: "))
    expect(row.locator(".reason")).to_contain_text(story)
    expect(run.locator("h1 .badge")).to_have_text("orphaned")
    expect(run.locator(".story")).to_contain_text(story)
    expect(run.locator(".story")).to_contain_text("orphaned by the reconciler")
    terminal = run.locator('.event[data-type="orphaned"] .text')
    expect(terminal).to_have_text("orphaned: executor lease expired")
    runs.screenshot(path=artifacts / "runs-view.png", full_page=True)
    # what the page shows is what the API says
    stored = httpx.get(f"{url}/runs/{run_id}", timeout=30).json()
    assert stored["status"] == "orphaned"
    assert (stored["error"]["code"], stored["error"]["message"]) == (
        "lease_expired",
        "executor lease expired",
    )


def test_cancel_and_resume_from_the_ui_with_readable_refusals(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker(
        LEASEHOLD_WATCHDOG_EVALUATOR="tests.support.judges:escalate",
        LEASEHOLD_WATCHDOG_FREE_RENEWALS="0",
    )
    sleeper = create(url, "demo.sleep", {"seconds": 120})
    page = open_page(context, f"{url}/#/runs/{sleeper}")
    expect(page.locator("h1 .badge")).to_have_text("running")
    page.get_by_role("button", name="Cancel…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Cancel {sleeper}?")
    dialog.get_by_role("button", name="Cancel run").click()
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    expect(page.locator('.event[data-type="cancelled"]')).to_be_visible()

    parked = create(url, "test.escalating", {})
    page.goto(f"{url}/#/runs/{parked}")
    expect(page.locator(".banner.parked")).to_contain_text("Waiting for a person")
    page.get_by_role("button", name="Resume…").click()
    field = dialog.get_by_label("Input (JSON, optional)")
    field.fill('{"answer": ')
    dialog.get_by_role("button", name="Resume run").click()
    expect(dialog.get_by_role("alert")).to_contain_text("not valid JSON")
    field.fill('{"answer": "use the backup CRM"}')
    dialog.get_by_role("button", name="Resume run").click()
    expect(page.locator("h1 .badge")).to_have_text("succeeded")
    expect(page.locator("details.json", has_text="Output")).to_contain_text("use the backup CRM")

    # someone else resumed it first: the API's 409 is shown, readably, in the dialog
    other = create(url, "test.escalating", {})
    page.goto(f"{url}/#/runs/{other}")
    page.get_by_role("button", name="Resume…").click()
    resumed = httpx.post(f"{url}/runs/{other}/resume", json={"input": "by API"}, timeout=30)
    assert resumed.status_code == 202
    dialog.get_by_role("button", name="Resume run").click()
    expect(dialog.get_by_role("alert")).to_contain_text("(HTTP 409)")


def test_with_api_keys_the_console_asks_for_one_and_sends_it_on_every_call(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    processes.worker()
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(f"{url}/")
    login = page.get_by_role("dialog")
    expect(login).to_contain_text("This API needs a key")
    expect(page.locator("main")).to_contain_text("Authentication required")
    login.get_by_label("API key").fill("not-the-key-0123456789")
    login.get_by_role("button", name="Use key").click()
    expect(login).to_contain_text("did not accept that key")
    login.get_by_label("API key").fill(KEY)
    with page.expect_request(lambda request: request.url.endswith("/activity")) as stream:
        login.get_by_role("button", name="Use key").click()
    assert stream.value.headers["authorization"] == f"Bearer {KEY}"
    expect(page.locator(".connection")).to_have_text("live")
    run_id = create(url, "demo.sleep", {"seconds": 0.5}, Authorization=f"Bearer {KEY}")
    expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_have_attribute(
        "data-status", "succeeded"
    )
    assert not [seen for seen in urls if KEY in seen], "the key must never be in a URL"
    # a phone-sized window: the table scrolls inside its region, the page does not
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.get_by_role("region", name="Recent runs")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_run_is_followed_with_a_stream_token_and_no_key_on_its_stream(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    processes.worker()
    run_id = create(url, "demo.sleep", {"seconds": 1}, Authorization=f"Bearer {KEY}")
    page = context.new_page()
    page.add_init_script(f"sessionStorage.setItem('leasehold.apiKey', {KEY!r})")
    streams: list[Any] = []
    page.on(
        "request",
        lambda request: (
            streams.append(request) if f"/runs/{run_id}/events" in request.url else None
        ),
    )
    page.goto(f"{url}/#/runs/{run_id}")
    last_event_is(page, "succeeded", banner_hidden=True)
    assert streams, "the page followed the run"
    for request in streams:
        assert "access_token=" in request.url
        assert "authorization" not in request.headers, "the stream carries the token alone"
