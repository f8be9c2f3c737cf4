"""The console's views checked by axe-core (WCAG 2.1 A and AA rules) in a real Chromium.

The issue asks for accessible markup (labels, roles, keyboard focus); these
tests hold every view to it automatically, on the state a person would see: the
runs table with runs in it, a run page mid-wait (banner up), the workers view,
and a confirmation dialog open. ``axe-playwright-python`` ships axe-core and
injects it into the page.
"""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.test_console import KEY, create, create_hung_tool_run, open_page
from tests.support.processes import Processes

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
