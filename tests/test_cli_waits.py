"""``leasehold runs get`` says what a run waits for: its question, its deadline, its limit.

The lines are held here on runs built as the API returns them (``print_run`` is what
``runs get`` calls), and once end to end: a ``demo.review`` whose signal never came asks
a person, and ``runs get`` prints the handler's question.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from app.cli.api_calls import print_run
from app.models import Run, RunStatus
from tests.support.processes import Processes
from tests.support.waits import AT_MS
from tests.test_cli import CLI_TIMEOUT_S, leasehold


def shown(capsys: pytest.CaptureFixture[str], **fields: Any) -> list[str]:
    run = Run(
        id="default.R",
        queue="default",
        handler="demo.review",
        created_at=datetime.now(UTC),
        **fields,
    )
    print_run(run, as_json=False)
    return capsys.readouterr().out.splitlines()


def test_a_signal_wait_shows_its_words_its_deadline_with_the_date_and_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wait = {"kind": "signal", "subject": "review", "step": "signal:review:1", "until_ms": AT_MS}
    lines = shown(capsys, status=RunStatus.WAITING, waiting_for=wait)
    assert lines[-3:] == [
        "waiting   parked until signal review arrives, or until 06:40:29 (its timeout); "
        "no lease held",
        "deadline  2026-11-30T06:40:29.393000+00:00",
        "signal    leasehold runs signal default.R review --payload JSON",
    ]


def test_a_wait_without_a_deadline_has_no_deadline_line(capsys: pytest.CaptureFixture[str]) -> None:
    wait = {"kind": "join", "subject": "all", "step": "join:1", "children": 2, "pending": 1}
    lines = shown(capsys, status=RunStatus.WAITING, waiting_for=wait)
    assert (
        lines[-1]
        == "waiting   parked on a join (all) of 2 children, 1 not ended yet; no lease held"
    )
    assert not any(line.startswith("deadline") for line in lines)


def test_a_question_to_a_person_is_shown_before_what_unparks_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    question = {"question": "nobody reviewed draft #1: approve?"}
    lines = shown(
        capsys,
        status=RunStatus.WAITING_HUMAN,
        escalation={"reason": "ask_human", "question": question, "step": "human:ask:1"},
        waiting_for={"kind": "human", "subject": "ask", "step": "human:ask:1", "since_ms": AT_MS},
    )
    assert lines[-3:] == [
        'question  {"question": "nobody reviewed draft #1: approve?"}',
        "waiting   parked until a person answers ask; no lease held",
        "unpark    leasehold runs resume default.R --input JSON  (what you decided)",
    ]


def test_a_queued_run_held_back_by_a_limit_says_which(capsys: pytest.CaptureFixture[str]) -> None:
    lines = shown(capsys, status=RunStatus.QUEUED, blocked_on="k:tenant-a")
    assert "blocked   on a slot of concurrency key tenant-a (at its limit)" in lines
    lines = shown(capsys, status=RunStatus.QUEUED, blocked_on="b:v1")
    assert "blocked   on a live worker of build v1" in lines
    assert not any("blocked" in line for line in shown(capsys, status=RunStatus.RUNNING))


def test_runs_get_prints_the_question_a_handler_asked(processes: Processes) -> None:
    _, url = processes.api()
    processes.worker()
    submitted = leasehold(
        "submit",
        "demo.review",
        "--input",
        '{"timeout_s": 0, "subject": "draft é"}',
        "--json",
        api_url=url,
    )
    run_id = Run.model_validate_json(submitted.stdout).id
    deadline = time.monotonic() + CLI_TIMEOUT_S
    got = leasehold("runs", "get", run_id, api_url=url)
    while "question  " not in got.stdout and time.monotonic() < deadline:
        got = leasehold("runs", "get", run_id, api_url=url)  # polling for the park
    lines = got.stdout.splitlines()
    assert 'question  {"question": "nobody reviewed draft é: approve?"}' in lines, got.stdout
    assert "waiting   parked until a person answers ask; no lease held" in lines
    assert f"unpark    leasehold runs resume {run_id} --input JSON  (what you decided)" in lines
