"""The console tells every wait in the table's words, as the CLI does, in Chromium.

``describe.js`` is imported into a console page as the console imports it (it reads
``wait_kinds.json`` from the API it was served by) and given every example of
``tests/support/waits.py``: its words, titles and the timeline's line are held equal
to the CLI's (:mod:`app.wait_kinds`). The browser's clock is UTC, as the CLI's lines
are, so the times of day compare as they are. A queued ``delay_s`` run's page says it
waits for its start, not that an operation is stalled; a run parked on a signal says
so on its page, and the queues view counts it as waiting, not delayed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from app.wait_kinds import blocked_on_words, wait_title
from tests.console.conftest import UI_TIMEOUT_MS
from tests.support.processes import Processes
from tests.support.waits import BLOCKED_ON, WAITS

SAY = """async ([waits, blocked]) => {
    const words = await import("/console/assets/describe.js");
    return {
        texts: waits.map((data) => words.waitText(data)),
        titles: waits.map((data) => words.waitTitle(data)),
        lines: waits.map((data) => words.describe({ type: "wait", data })),
        blocked: blocked.map((resource) => words.blockedOnText(resource)),
    };
}"""


@pytest.fixture
def utc_context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh profile whose clock reads UTC in en-US, as the CLI's lines do."""
    expect.set_options(timeout=UI_TIMEOUT_MS)
    context = browser.new_context(timezone_id="UTC", locale="en-US")
    context.set_default_timeout(UI_TIMEOUT_MS)
    yield context
    context.close()


def run_page(context: BrowserContext, url: str, body: dict[str, Any]) -> Page:
    """The console's page of a run created with ``body``."""
    created = httpx.post(f"{url}/runs", json=body, timeout=30)
    assert created.status_code == 201, created.text
    page = context.new_page()
    page.goto(f"{url}/#/runs/{created.json()['id']}")
    return page


def test_every_wait_reads_the_same_in_the_console_as_in_the_cli(
    processes: Processes, utc_context: BrowserContext
) -> None:
    _, url = processes.api()
    page = utc_context.new_page()
    page.goto(f"{url}/console")
    datas = [data for _, data, _ in WAITS]
    said: dict[str, Any] = page.evaluate(SAY, [datas, [resource for resource, _ in BLOCKED_ON]])
    for (name, data, words), text, title, line in zip(
        WAITS, said["texts"], said["titles"], said["lines"], strict=True
    ):
        assert text == words, name
        assert line == words, name  # the timeline's line for the event
        assert title == wait_title(data), name
    assert said["blocked"] == [words for _, words in BLOCKED_ON]
    assert said["blocked"] == [blocked_on_words(resource) for resource, _ in BLOCKED_ON]


def test_a_delayed_start_says_when_it_starts_not_that_an_operation_stalls(
    processes: Processes, utc_context: BrowserContext
) -> None:
    _, url = processes.api()  # no worker: nothing could start it anyway
    page = run_page(utc_context, url, {"handler": "demo.echo", "input": {}, "delay_s": 600})
    banner = page.locator(".wait-banner")
    expect(banner).to_contain_text("Delayed start")
    expect(banner).to_contain_text("queued: starts no earlier than ")
    expect(banner).to_contain_text(" from now)")  # its deadline, counting down
    expect(page.locator('.event[data-type="wait"]')).to_contain_text("(a delayed start)")
    shown = banner.inner_text()  # rendered by now: the words above are in it
    assert not [word for word in ("watchdog", "undefined", "renewals", "lease") if word in shown]


def test_a_run_parked_on_a_signal_is_told_on_its_page_and_counted_waiting_in_queues(
    processes: Processes, utc_context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker()
    page = run_page(utc_context, url, {"handler": "demo.review", "input": {"timeout_s": 600}})
    banner = page.locator(".wait-banner")
    expect(banner).to_contain_text("Waiting for signal review")
    expect(banner).to_contain_text("parked until signal review arrives, or until ")
    # the park came with a `wait` event only: the page read the record again on it
    expect(page.locator("h1 .badge")).to_have_text("waiting")
    expect(page.locator("dl.fields")).to_contain_text("(its timeout); no lease held")
    expect(banner).not_to_contain_text("watchdog")
    page.goto(f"{url}/#/queues")
    row = page.locator('tr[data-queue="default"]')
    expect(row.locator('[data-field="waiting"]')).to_have_text("1")
    expect(row.locator('[data-field="delayed"]')).to_have_text("0")
    # and what the page counts is what the API counts: the parked run, no retry backoff
    queue = httpx.get(f"{url}/queues/default", timeout=30).json()
    assert (queue["waiting"], queue["delayed"]) == (1, 0)
