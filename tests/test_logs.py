"""Logs: one line per event; JSON with LEASEHOLD_LOG_FORMAT=json; no secrets or inputs.

The formatter tests pin the line shape; the process tests read what a real API
and a real worker write, as an operator's log pipeline would.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.telemetry.logs import JsonFormatter, configure_logging, make_formatter
from tests.support.polling import eventually
from tests.support.processes import Processes

KEY = "k-logs-0123456789abcdef"
SECRET_INPUT = "input-that-must-not-be-logged"


def record(message: str = "run %s", *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("app.executor", logging.INFO, __file__, 1, message, args, None)
    for name, value in extra.items():
        setattr(made, name, value)
    return made


def test_json_line_carries_the_run_context_fields() -> None:
    line = JsonFormatter().format(
        record("run %s", "succeeded", run_id="default.X", owner_id="w-1", fence=3)
    )
    entry = json.loads(line)
    assert entry["message"] == "run succeeded"
    assert entry["level"] == "INFO"
    assert entry["logger"] == "app.executor"
    assert (entry["run_id"], entry["owner_id"], entry["fence"]) == ("default.X", "w-1", 3)
    assert entry["ts"].endswith("+00:00")


def test_json_line_leaves_out_context_it_does_not_have_and_any_other_extra() -> None:
    entry = json.loads(JsonFormatter().format(record("hello", run_id="r", input={"x": 1})))
    assert "owner_id" not in entry and "fence" not in entry
    assert "input" not in entry, "only the named context fields are copied from a record"


def test_a_traceback_stays_on_one_line() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        failed = record("failed")
        failed.exc_info = sys.exc_info()
    line = JsonFormatter().format(failed)
    assert "\n" not in line
    assert "ValueError: bad" in json.loads(line)["exc"]


def test_text_format_appends_the_context_for_people() -> None:
    line = make_formatter("text").format(record("run %s", "failed", run_id="default.X", fence=2))
    assert line.endswith("run failed run_id=default.X fence=2")


def test_uvicorn_loggers_go_through_the_configured_handler() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO", "json")
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            assert logging.getLogger(name).handlers == []
            assert logging.getLogger(name).propagate
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line parsed as JSON; fails on the first line that is not."""
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                pytest.fail(f"log line {number} is not JSON: {line!r}")
    return entries


Entries = list[dict[str, Any]]


async def poll_log(
    proc_log: Callable[[], str], until: Callable[[Entries], bool], what: str
) -> Entries:
    async def read() -> list[dict[str, Any]]:
        return json_lines(proc_log())

    entries: list[dict[str, Any]] = await eventually(read, until=until, what=what)
    return entries


@pytest.mark.slow
async def test_api_writes_json_lines_including_uvicorn_access_without_keys_or_inputs(
    processes: Processes,
) -> None:
    proc, url = processes.api(LEASEHOLD_LOG_FORMAT="json", LEASEHOLD_API_KEYS=KEY)
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        created = await client.post(
            "/runs",
            json={"handler": "demo.echo", "input": {"message": SECRET_INPUT}},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert created.status_code == 201
        refused = await client.get(
            "/runs", headers={"Authorization": "Bearer k-wrong-guess-123456"}
        )
        assert refused.status_code == 401

    def has_access_lines(entries: list[dict[str, Any]]) -> bool:
        return sum(entry["logger"] == "uvicorn.access" for entry in entries) >= 2

    entries = await poll_log(proc.log, has_access_lines, "two access log lines")
    access = [entry for entry in entries if entry["logger"] == "uvicorn.access"]
    assert {(entry["method"], entry["path"], entry["status"]) for entry in access} >= {
        ("POST", "/runs", 201),
        ("GET", "/runs", 401),
    }
    assert any(
        entry["logger"].startswith("uvicorn.") and "startup" in entry["message"].lower()
        for entry in entries
    ), "uvicorn's own lines are JSON too"
    text = proc.log()
    for secret in (KEY, "k-wrong-guess-123456", SECRET_INPUT):
        assert secret not in text


@pytest.mark.slow
async def test_worker_json_lines_carry_run_id_owner_id_and_fence(
    processes: Processes, run_store: RunStore
) -> None:
    run = (await run_store.create(NewRun(handler="demo.echo", input={"message": SECRET_INPUT}))).run
    # DEBUG: the per-run outcome line is a debug line (a line per run costs at high rates)
    worker = processes.worker(LEASEHOLD_LOG_FORMAT="json", LEASEHOLD_LOG_LEVEL="DEBUG")

    def run_logged(entries: list[dict[str, Any]]) -> bool:
        return any(entry.get("run_id") == run.id for entry in entries)

    entries = await poll_log(worker.log, run_logged, f"a log line about {run.id}")
    about_run = [entry for entry in entries if entry.get("run_id") == run.id]
    assert about_run[0]["owner_id"].startswith("w-")
    assert about_run[0]["fence"] == 1
    assert SECRET_INPUT not in worker.log()
