"""A run's tree in the console: its children with their status, a click opens a child,
and the child's page links back to its parent."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.console.test_accessibility import violations
from tests.console.test_console import create, open_page
from tests.support.processes import Processes


def test_a_parent_s_page_lists_its_children_and_opens_one(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    processes.worker("--concurrency", "4")
    fan_out = {
        "children": 2,
        "handler": "demo.sleep",
        "child_input": {"seconds": 0.5, "progress_every_s": 0.1},
        "on_parent_end": "detach",
    }
    parent = create(url, "test.fan_out", fan_out)
    page = open_page(context, f"{url}/#/runs/{parent}")
    rows = page.locator("tr[data-child-id]")
    expect(rows).to_have_count(2)
    children = httpx.get(f"{url}/runs/{parent}/children", timeout=30).json()["items"]
    assert [c["id"] for c in children] == [
        rows.nth(i).get_attribute("data-child-id") for i in range(2)
    ]
    # the page keeps reading while children run: both end up shown as succeeded
    for child in children:
        expect(page.locator(f'tr[data-child-id="{child["id"]}"] .badge')).to_have_text("succeeded")
    expect(page.get_by_role("heading", name="Children (2, 0 live)")).to_be_visible()
    assert violations(page) == []
    page.get_by_role("link", name=children[0]["id"]).click()
    expect(page.locator("h1")).to_contain_text(children[0]["id"])
    expect(page.locator("tr[data-child-id]")).to_have_count(0)  # a child without children
    page.get_by_role("link", name=parent).first.click()  # "Parent"
    expect(page.locator("h1")).to_contain_text(parent)
    expect(page.locator("tr[data-child-id]")).to_have_count(2)
