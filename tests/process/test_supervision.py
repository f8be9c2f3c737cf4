"""Slow is not dead, end to end: wait and verdict events on the stream, typed budget
failures that are not retried, escalation to a person and resume — real worker,
real API, real Redis."""

from __future__ import annotations

from typing import Any

from app.client import AsyncClient
from app.models import Run, RunEvent, RunStatus
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import Processes


async def follow(
    url: str, handler: str, payload: dict[str, Any], **options: Any
) -> tuple[Run, list[RunEvent]]:
    async with AsyncClient(url) as client:
        run = await client.create(handler, payload, **options)
        events = [event async for event in client.events(run.id)]
        return await client.get(run.id), events


def agent_input(**overrides: Any) -> dict[str, Any]:
    return {"tools": [], **overrides}


async def test_a_slow_model_that_keeps_streaming_is_renewed_and_succeeds(
    processes: Processes,
) -> None:
    """Progress within each lease period renews the call, however long it takes.

    A token every 100 ms against a 1 s lease (two free renewals, then at least two
    for the evidence), and a renewal cap (max_renewals, which bounds every call
    whatever its progress: tests/supervision) far above what the call needs. It was
    50 tokens 50 ms apart against a 0.3 s lease and the default cap of 10: on a
    loaded machine the stream stretched past 11 leases and the cap intervened, or a
    0.35 s stall was rightly judged silence (it failed at load 8.5).
    """
    _, url = processes.api()
    processes.worker(LEASEHOLD_WATCHDOG_MAX_RENEWALS="1000")
    run, events = await follow(
        url,
        "demo.agent",
        agent_input(model={"first_token_s": 0.1, "gap_s": 0.1, "tokens": 50}, model_lease_s=1.0),
    )
    assert run.status == RunStatus.SUCCEEDED, run.error
    verdicts = [event.data["verdict"] for event in events if event.type == "verdict"]
    assert len(verdicts) >= 4  # the 5.1 s call outlived its lease again and again...
    assert set(verdicts) == {"RENEW"}  # ...and was never stopped
    waits = [event for event in events if event.type == "wait"]
    assert waits[0].data["kind"] == "model_call"
    assert {"elapsed_s", "renewals", "since_progress_s"} <= set(waits[0].data)
    assert sum(1 for event in events if event.type == "token") == 50


async def test_a_hung_tool_is_intervened_by_evidence_and_the_run_fails_typed_not_retried(
    processes: Processes,
) -> None:
    _, url = processes.api()
    processes.worker(LEASEHOLD_WATCHDOG_SUSPICION_THRESHOLD="1.5")
    run, events = await follow(
        url,
        "demo.agent",
        agent_input(
            model={"first_token_s": 0, "tokens": 3, "gap_s": 0},
            tools=[{"name": "crm.search", "hang": True}],
            tool_lease_s=0.3,
        ),
        max_attempts=3,
    )
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "operation_intervened"
    assert run.error.retryable is False
    assert run.attempt == 1
    verdicts = [event.data for event in events if event.type == "verdict"]
    assert [v["verdict"] for v in verdicts][:2] == ["RENEW", "RENEW"]
    assert verdicts[-1]["verdict"] == "INTERVENE"
    assert verdicts[-1]["subject"] == "crm.search"
    assert events[-1].type == "failed"


async def test_each_budget_fires_alone_with_its_own_code_and_is_not_retried(
    processes: Processes,
) -> None:
    _, url = processes.api()
    processes.worker()
    cases = {
        "first_progress_timeout": agent_input(
            model={"first_token_s": 30, "tokens": 5}, first_progress_s=0.5, model_lease_s=60
        ),
        "idle_timeout": agent_input(
            model={"first_token_s": 0, "gap_s": 0.01, "tokens": 50, "stall_after": 5},
            idle_s=0.5,
            model_lease_s=60,
        ),
        "duration_exceeded": agent_input(
            model={"first_token_s": 0, "gap_s": 0.02, "tokens": 100_000},
            idle_s=0.5,
            max_duration_s=1.0,
            model_lease_s=60,
        ),
    }
    for code, payload in cases.items():
        run, events = await follow(url, "demo.agent", payload, max_attempts=3)
        assert run.status == RunStatus.FAILED, code
        assert run.error is not None
        assert run.error.code == code
        assert run.error.retryable is False
        assert run.attempt == 1, f"{code} must not be retried"
        assert [event.type for event in events].count("requeued") == 0


async def test_escalate_parks_the_run_for_a_person_and_resume_finishes_it(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker(
        LEASEHOLD_WATCHDOG_EVALUATOR="tests.support.judges:escalate",
        LEASEHOLD_WATCHDOG_FREE_RENEWALS="0",
    )
    async with AsyncClient(url) as client:
        run = await client.create("test.escalating", {})
        parked = await eventually(
            lambda: client.get(run.id),
            until=lambda r: r.status == RunStatus.WAITING_HUMAN,
            what="waiting_human",
        )
        assert parked.owner_id is None
        assert parked.lease_expires_at is None
        held_fence = parked.fence - 1
        events = await run_store.read_events(run.id)
        assert [event.type for event in events][-2:] == ["verdict", "waiting_human"]
        assert events[-1].data["reason"] == "tool_call needs a person"
        assert events[-1].fence == held_fence + 1
        status = await client.resume(run.id, {"answer": "use the backup CRM"})
        assert status.status == RunStatus.QUEUED
        stream = [event async for event in client.events(run.id, last_event_id=events[-1].id)]
        done = await client.get(run.id)
    assert [event.type for event in stream] == ["resumed", "claimed", "succeeded"]
    assert done.status == RunStatus.SUCCEEDED
    assert done.output["resumed_with"] == {"answer": "use the backup CRM"}
    assert done.output["fence"] > held_fence + 1


async def test_resume_of_a_run_that_is_not_waiting_is_409(processes: Processes) -> None:
    _, url = processes.api()
    async with AsyncClient(url) as client:
        run = await client.create("demo.echo", {})
        response = await client.http.post(f"/runs/{run.id}/resume", json={"input": 1})
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"


async def test_run_level_budgets_end_the_run_with_their_own_codes(processes: Processes) -> None:
    _, url = processes.api()
    processes.worker()
    steps_run, steps_events = await follow(
        url,
        "demo.agent",
        agent_input(steps=20, model={"first_token_s": 0, "tokens": 1, "gap_s": 0}),
        budget={"max_steps": 2},
    )
    assert steps_run.error is not None
    assert steps_run.error.code == "budget_exhausted"
    assert steps_run.output is None
    granted = [e for e in steps_events if e.type == "verdict" and e.data["subject"] == "steps"]
    assert [e.data["verdict"] for e in granted] == ["RENEW", "RENEW", "RENEW", "INTERVENE"]
    slow_run, _ = await follow(
        url, "demo.sleep", {"seconds": 30}, budget={"max_duration_s": 0.5}, max_attempts=2
    )
    assert slow_run.error is not None
    assert slow_run.error.code == "duration_exceeded"
    assert slow_run.attempt == 1
