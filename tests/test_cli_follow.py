"""`leasehold submit --follow` and `leasehold runs watch`: what a person sees in a terminal."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime

from app.models import RunEvent
from app.render import EventPrinter
from tests.support.processes import REPO_ROOT, Processes


def leasehold(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO_ROOT,
    )


def event(kind: str, **data: object) -> RunEvent:
    return RunEvent(
        id="1-0",
        run_id="default.01ARZ3NDEKTSV4RRFFQ69G5FAV",
        type=kind,
        ts=datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC),
        fence=1,
        data=data,
    )


def test_tokens_flow_inline_and_other_events_get_a_line_each() -> None:
    out = io.StringIO()
    printer = EventPrinter(out)
    for item in [
        event("claimed", owner_id="w-1", attempt=1),
        event("token", text="Hel"),
        event("token", text="lo"),
        event("progress", step=2),
        event(
            "orphaned",
            error={
                "code": "lease_expired",
                "message": "executor lease expired",
                "details": {"owner_id": "w-1", "fence": 1},
            },
        ),
    ]:
        printer.show(item)
    lines = out.getvalue().splitlines()
    assert lines[0] == "12:00:00 -- claimed by w-1 (attempt 1)  [fence 1]"
    assert lines[1] == "Hello"
    assert lines[2] == '12:00:00 -- progress {"step":2}  [fence 1]'
    assert lines[3] == (
        "12:00:00 == orphaned: executor lease expired (owner w-1, fence 1)  [fence 1]"
    )


def test_submit_follow_streams_tokens_and_exits_zero_on_success(processes: Processes) -> None:
    _, url = processes.api()
    processes.worker()
    result = leasehold(
        "submit", "test.tokens", "--input", '{"count": 5}', "--follow", "--api-url", url
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("following default.")
    assert "t0 t1 t2 t3 t4 " in result.stdout
    assert "== succeeded" in lines[-1]


def test_runs_watch_json_prints_one_event_per_line_and_fails_for_a_failed_run(
    processes: Processes,
) -> None:
    _, url = processes.api()
    processes.worker()
    created = leasehold(
        "submit", "demo.fail", "--input", '{"message": "nope"}', "--json", "--api-url", url
    )
    run_id = json.loads(created.stdout)["id"]
    result = leasehold("runs", "watch", run_id, "--json", "--api-url", url)
    assert result.returncode == 1
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [item["type"] for item in events] == ["created", "claimed", "failed"]
    assert events[-1]["data"]["error"]["message"] == "nope"


def test_watching_an_unknown_run_says_so(processes: Processes) -> None:
    _, url = processes.api()
    result = leasehold("runs", "watch", "default.01ARZ3NDEKTSV4RRFFQ69G5FAV", "--api-url", url)
    assert result.returncode == 1
    assert "not found" in result.stderr
