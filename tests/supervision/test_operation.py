"""Operation leases, the watchdog ladder and budgets, as a handler experiences them.

Pure asyncio with short leases: the events the operation emits are recorded in
a list instead of a Redis stream (the process tests cover the stream).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.errors import (
    BudgetExhausted,
    DurationExceeded,
    EscalationRequested,
    FirstProgressTimeout,
    IdleTimeout,
    OperationIntervened,
)
from app.supervision.operation import Operation, OperationLimits, run_supervised
from app.supervision.steps import StepBudget
from app.supervision.verdicts import Evidence
from app.supervision.watchdog import Watchdog, WatchdogPolicy

LEASE_S = 0.05


class Recorder:
    """Stands in for ctx.emit: keeps (type, data) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.waiting = asyncio.Event()

    async def __call__(self, event_type: str, data: dict[str, Any]) -> None:
        self.events.append((event_type, data))
        if event_type == "wait":
            self.waiting.set()

    def verdicts(self) -> list[str]:
        return [data["verdict"] for kind, data in self.events if kind == "verdict"]

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


class ScriptedEvaluator:
    """An evaluator whose behaviour the test chooses."""

    name = "scripted"

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.calls = 0

    async def judge(self, evidence: Evidence) -> Any:
        self.calls += 1
        if self.behaviour == "raise":
            raise RuntimeError("judge crashed")
        if self.behaviour == "hang":
            await asyncio.Event().wait()
        if self.behaviour == "garbage":
            return {"verdict": "EXPLODE"}
        return {"verdict": self.behaviour, "reason": "scripted", "note": "try another source"}


def operation(
    recorder: Recorder,
    *,
    policy: WatchdogPolicy | None = None,
    evaluator: Any = None,
    nudges: list[str] | None = None,
    **limits: float,
) -> Operation:
    watchdog = Watchdog(policy or WatchdogPolicy(suspicion_threshold=1.0), evaluator)
    return Operation(
        kind="tool_call",
        subject="crm.search",
        limits=OperationLimits(lease_s=limits.pop("lease_s", LEASE_S), **limits),
        watchdog=watchdog,
        emit=recorder,
        nudges=nudges if nudges is not None else [],
    )


async def test_an_operation_that_keeps_progressing_is_never_intervened() -> None:
    recorder = Recorder()
    # a longer lease than the other tests': on a loaded machine the loop can stall for
    # more than 50 ms, and a stall the size of a lease is silence the watchdog rightly sees
    lease_s = 0.2
    # and no renewal cap: ten leases of 20 ms sleeps run past the default 10 renewals as
    # soon as the loop is a little late, and that cap is another rung than the evidence
    policy = WatchdogPolicy(suspicion_threshold=1.0, max_renewals=1000)
    async with operation(recorder, policy=policy, lease_s=lease_s) as op:
        for _ in range(100):  # ten leases' worth of work, progress every 20 ms
            await asyncio.sleep(lease_s / 10)
            op.progress(tokens=1)
    assert recorder.verdicts()
    assert set(recorder.verdicts()) == {"RENEW"}
    assert recorder.kinds().count("wait") == recorder.kinds().count("verdict")
    assert op.elapsed_s >= 10 * lease_s


async def test_a_silent_operation_gets_its_free_renewals_then_intervene_by_evidence() -> None:
    recorder = Recorder()
    with pytest.raises(OperationIntervened) as failure:
        async with operation(recorder):
            await asyncio.Event().wait()  # a tool that never answers
    verdicts = recorder.verdicts()
    assert verdicts[:2] == ["RENEW", "RENEW"]
    assert verdicts[-1] == "INTERVENE"
    assert failure.value.code == "operation_intervened"
    assert failure.value.retryable is False
    reasons = [data["reason"] for kind, data in recorder.events if kind == "verdict"]
    assert reasons[0].startswith("free renewal")
    assert "suspicion" in reasons[-1]


@pytest.mark.parametrize("behaviour", ["raise", "hang", "garbage"])
async def test_a_failing_evaluator_means_renew_and_max_renewals_still_ends_it(
    behaviour: str,
) -> None:
    recorder = Recorder()
    evaluator = ScriptedEvaluator(behaviour)
    policy = WatchdogPolicy(free_renewals=1, max_renewals=4, evaluator_timeout_s=0.02)
    with pytest.raises(OperationIntervened) as failure:
        async with operation(recorder, policy=policy, evaluator=evaluator):
            await asyncio.Event().wait()
    assert recorder.verdicts() == ["RENEW", "RENEW", "RENEW", "RENEW", "INTERVENE"]
    assert evaluator.calls == 3
    evaluated = [
        data
        for kind, data in recorder.events
        if kind == "verdict" and data["evaluator"] == "scripted"
    ]
    assert all(data["verdict"] == "RENEW" for data in evaluated)
    assert "renewal budget used" in str(failure.value)


async def test_nudge_leaves_a_note_and_renews() -> None:
    recorder = Recorder()
    notes: list[str] = []
    policy = WatchdogPolicy(free_renewals=0, max_renewals=3)
    with pytest.raises(OperationIntervened):
        async with operation(
            recorder, policy=policy, evaluator=ScriptedEvaluator("NUDGE"), nudges=notes
        ):
            await asyncio.Event().wait()
    assert recorder.verdicts() == ["NUDGE", "NUDGE", "NUDGE", "INTERVENE"]
    assert notes == ["try another source"] * 3


async def test_escalate_stops_the_operation_and_asks_for_a_person() -> None:
    recorder = Recorder()
    policy = WatchdogPolicy(free_renewals=0)
    with pytest.raises(EscalationRequested) as escalation:
        async with operation(recorder, policy=policy, evaluator=ScriptedEvaluator("ESCALATE")):
            await asyncio.Event().wait()
    assert escalation.value.reason == "scripted"
    assert escalation.value.evidence["kind"] == "tool_call"


async def test_first_progress_budget_fires_alone_when_the_stream_never_starts() -> None:
    recorder = Recorder()
    with pytest.raises(FirstProgressTimeout) as failure:
        async with operation(recorder, lease_s=60, first_progress_s=0.1):
            await asyncio.Event().wait()
    assert failure.value.code == "first_progress_timeout"
    assert failure.value.retryable is False
    assert recorder.events == []  # the lease never fired: the budget alone ended it


async def test_idle_budget_fires_alone_when_chunks_stop() -> None:
    recorder = Recorder()
    with pytest.raises(IdleTimeout) as failure:
        async with operation(recorder, lease_s=60, idle_s=0.1) as op:
            for _ in range(5):
                op.progress()
                await asyncio.sleep(0.02)
            await asyncio.Event().wait()
    assert failure.value.code == "idle_timeout"
    assert recorder.events == []


async def test_idle_budget_fires_long_before_the_lease_when_the_first_chunk_comes_late() -> None:
    recorder = Recorder()

    async def stream() -> None:
        async with operation(recorder, lease_s=60, idle_s=0.1) as op:
            await asyncio.sleep(0.05)  # the connection takes a moment: the watcher sleeps first
            for _ in range(5):
                op.progress()
                await asyncio.sleep(0.02)
            await asyncio.Event().wait()  # the provider hangs mid-answer

    # before the fix the watcher slept until the 60 s lease and only then saw the silence
    with pytest.raises(IdleTimeout) as failure:
        await asyncio.wait_for(stream(), timeout=10)
    assert failure.value.details["elapsed_s"] < 10
    assert recorder.events == []  # the lease never fired: the budget alone ended it


async def test_duration_budget_fires_alone_when_chunks_never_stop() -> None:
    recorder = Recorder()
    with pytest.raises(DurationExceeded) as failure:
        async with operation(recorder, lease_s=60, idle_s=0.1, max_duration_s=0.3) as op:
            while True:
                op.progress()
                await asyncio.sleep(0.01)
    assert failure.value.code == "duration_exceeded"


async def test_a_slow_first_token_within_its_budget_is_fine() -> None:
    recorder = Recorder()
    async with operation(recorder, lease_s=60, first_progress_s=0.3, idle_s=0.05) as op:
        await asyncio.sleep(0.15)  # longer than idle_s: idle only counts after the first chunk
        for _ in range(5):
            op.progress()
            await asyncio.sleep(0.01)
    assert op.progress_count == 5


async def test_intervening_cancels_and_awaits_every_child_task() -> None:
    recorder = Recorder()
    finished: list[str] = []

    async def tool(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)  # cleanup that takes a moment
            finished.append(name)

    with pytest.raises(OperationIntervened):
        async with operation(recorder) as op:
            children = [op.create_task(tool("a")), op.create_task(tool("b"))]
            await asyncio.Event().wait()
    assert all(child.cancelled() for child in children)
    assert sorted(finished) == ["a", "b"]
    assert op.pending_children == 0


async def test_children_are_settled_when_the_work_fails_with_an_error() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="parse error"):
        async with operation(recorder, lease_s=60) as op:
            child = op.create_task(asyncio.Event().wait())
            await asyncio.sleep(0)
            raise ValueError("parse error")
    assert child.cancelled()


async def test_cancelling_the_run_during_a_wait_cancels_at_once_without_a_verdict() -> None:
    recorder = Recorder()
    policy = WatchdogPolicy(free_renewals=0, evaluator_timeout_s=30)
    evaluator = ScriptedEvaluator("hang")

    async def handler() -> None:
        async with operation(recorder, policy=policy, evaluator=evaluator):
            await asyncio.Event().wait()

    task = asyncio.create_task(handler())
    await asyncio.wait_for(recorder.waiting.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=1)
    assert recorder.kinds() == ["wait"]


async def test_supervise_runs_work_once_in_its_own_task_and_returns_its_result() -> None:
    recorder = Recorder()
    starts: list[int] = []

    async def work(op: Operation) -> str:
        starts.append(1)
        for _ in range(10):
            await asyncio.sleep(LEASE_S / 2)
            op.progress()
        return "done"

    result = await run_supervised(operation(recorder), work)
    assert result == "done"
    assert starts == [1]  # renewals re-arm the timer; the work is never restarted
    assert set(recorder.verdicts()) == {"RENEW"}


async def test_supervise_accepts_sync_work_run_in_a_thread() -> None:
    recorder = Recorder()

    def work(op: Operation) -> int:
        op.progress()
        return 7

    assert await run_supervised(operation(recorder, lease_s=60), work) == 7


async def test_max_steps_gets_at_most_three_proportional_extensions() -> None:
    recorder = Recorder()
    steps = StepBudget(4, watchdog=Watchdog(WatchdogPolicy()), ratio=0.5, emit=recorder)
    allowed = 0
    with pytest.raises(BudgetExhausted) as failure:
        while True:
            await steps.advance()
            allowed += 1
    assert allowed == 4 + 3 * 2
    assert recorder.verdicts() == ["RENEW", "RENEW", "RENEW", "INTERVENE"]
    extensions = [data["evidence"]["extension_steps"] for _, data in recorder.events]
    assert extensions == [2, 2, 2, 0]
    assert failure.value.code == "budget_exhausted"


async def test_unlimited_steps_are_never_capped() -> None:
    recorder = Recorder()
    steps = StepBudget(None, watchdog=Watchdog(WatchdogPolicy()), ratio=0.5, emit=recorder)
    for _ in range(1000):
        await steps.advance()
    assert recorder.events == []
