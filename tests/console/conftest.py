"""A real Chromium for the console tests, driven by Playwright for Python.

The browser is Debian's ``chromium`` (CI installs it with apt; Playwright's own
browser download is never used). Without it every test here is skipped for one
stated reason. Screenshots go to ``test-artifacts/`` (gitignored).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, expect, sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the flags this machine needs: no sandbox as root, and no calls to the outside
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# generous: a loaded 2-core machine runs the API, workers, Redis and the browser at once
UI_TIMEOUT_MS = 30_000

NO_BROWSER = "browser tests need Chromium on PATH (apt-get install chromium); skipped"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip this folder's tests, with one reason, when there is no browser to drive."""
    if CHROMIUM is not None:
        return
    skip = pytest.mark.skip(reason=NO_BROWSER)
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per module; a fresh context (profile) per test.

    Not per session: sync Playwright runs an event loop in the main thread while
    it is open, and pytest-asyncio cannot start its own loop for later async tests
    while that one is registered as running.
    """
    assert CHROMIUM is not None
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A new, empty browser profile: no storage shared between tests."""
    expect.set_options(timeout=UI_TIMEOUT_MS)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    yield context
    context.close()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
