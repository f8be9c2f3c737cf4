"""The console's words for a run's end (``app/console/assets/describe.js``), in Chromium.

The module is imported into a console page as the console imports it, and given the
event and the run the API sends for an orphaned run: the same words as the CLI's
(``app/render.py``), each said once.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import BrowserContext

from tests.support.processes import Processes

EVIDENCE = {
    "owner_id": "w-3",
    "fence": 1,
    "last_renewed_at_ms": 1_796_020_829_393,
    "lease_expires_at_ms": 1_796_020_859_393,
    "detected_at_ms": 1_796_020_863_981,
}
ORPHANED = {
    "code": "lease_expired",
    "message": "executor lease expired",
    "retryable": False,
    "details": EVIDENCE,
}
FAILED = {"code": "demo_failure", "message": "it broke", "retryable": False, "details": {}}

WORDS = """async ([orphaned, failed]) => {
    const words = await import("/console/assets/describe.js");
    const event = (type, error) => ({ type, data: { error } });
    return {
        line: words.describe(event("orphaned", orphaned)),
        reason: words.reasonOf({ status: "orphaned", error: orphaned }),
        failed: words.describe(event("failed", failed)),
        failedReason: words.reasonOf({ status: "failed", error: failed }),
    };
}"""


def test_an_orphaned_run_reads_orphaned_executor_lease_expired_and_its_story_once(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api()
    page = context.new_page()
    page.goto(f"{url}/console")
    said: dict[str, Any] = page.evaluate(WORDS, [ORPHANED, FAILED])
    assert said["line"] == "orphaned: executor lease expired"
    reason = said["reason"]
    assert reason.startswith("executor lease expired: worker w-3 stopped renewing at ")
    assert "; its lease ran out at " in reason and "; orphaned by the reconciler at " in reason
    assert reason.count("lease expired") == 1 and reason.count("executor") == 1
    # a code its message does not say is kept: failed runs read as before
    assert said["failed"] == "failed: demo_failure: it broke"
    assert said["failedReason"] == "demo_failure: it broke"
