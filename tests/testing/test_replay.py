"""The replayer catches the drifts the live check parks runs for, from exported histories.

Each case records a run of ``kit.steps`` on a test stack (the real scripts and worker,
on the session's Redis) until it parks on a signal, exports its history the way
``GET /runs/{id}/history`` does, and replays it against the reordered code: the report's
drift must be the one the live run then parks with — the same details, field for
field — and no effect function is called and no child made by the replay. The
unchanged code passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import app.demo.handlers  # noqa: F401 - demo.echo, the children kit.steps spawns
from app.models import Run
from app.models.history import RunHistory
from app.store.runs.history import RunHistoryReader
from app.testing import TestStack, replay_async
from tests.support import kit_handlers
from tests.support.kit_handlers import CALLED, STEPS, steps_handler
from tests.support.polling import eventually


@pytest.fixture
async def stack(redis_url: str) -> AsyncIterator[TestStack]:
    async with TestStack(redis_url=redis_url) as running:
        yield running


async def export(stack: TestStack, run_id: str) -> RunHistory:
    """What GET /runs/{id}/history answers, round-tripped through JSON (a file in CI)."""
    history = await RunHistoryReader(stack.runs.ctx).read(run_id, max_events=1000)
    return RunHistory.model_validate_json(history.model_dump_json())


async def recorded(stack: TestStack, steps: str) -> tuple[str, RunHistory]:
    STEPS[0] = steps
    run_id = await stack.start("kit.steps", {"user": "u"})

    async def probe() -> Run:
        return await stack.settle(run_id)

    # a join parks first, then wakes when its child ends: wait for the signal's park
    await eventually(
        probe,
        until=lambda run: (run.waiting_for or {}).get("kind") == "signal",
        what="parked on a signal",
    )
    return run_id, await export(stack, run_id)


CASES = [
    pytest.param("e:a,w:go,e:b", "e:b,w:go,e:a", "e|a:1", "e|b:1", id="effect"),
    pytest.param("w:go,w:two", "w:two,w:go", "w|signal:go:1", "w|signal:two:1", id="wait"),
    pytest.param("s:kid,w:go", "e:a,s:kid,w:go", "s|spawn:1", "e|a:1", id="spawn"),
    pytest.param("s:kid,j:all,w:go", "s:kid,w:go,j:all", "j|join:1", "w|signal:go:1", id="join"),
]


@pytest.mark.parametrize(("old", "new", "recorded_step", "taken_step"), CASES)
async def test_the_replayer_reports_the_drift_the_live_run_then_parks_with(
    stack: TestStack, old: str, new: str, recorded_step: str, taken_step: str
) -> None:
    run_id, history = await recorded(stack, old)
    children = (await export(stack, run_id)).family
    called = list(CALLED)

    report = await replay_async(history, steps_handler(new))

    assert report.outcome == "drift" and not report.ok
    assert report.drift is not None
    assert (report.drift.details["recorded"], report.drift.details["taken"]) == (
        recorded_step,
        taken_step,
    )
    assert called == CALLED  # no effect function ran
    assert (await export(stack, run_id)).family == children  # no child was made
    # the live wake on the new code: the same drift, the same details
    STEPS[0] = new
    await stack.signal(run_id, "go", "now")
    parked = await stack.settle(run_id)
    assert parked.status == "reconciliation_required" and parked.error is not None
    assert parked.error.code == "version_drift"
    assert parked.error.details == report.drift.details


@pytest.mark.parametrize("steps", ["e:a,w:go,e:b", "s:kid,j:all,w:go", "w:go,w:two"])
async def test_the_unchanged_handler_replays_to_where_the_run_waits(
    stack: TestStack, steps: str
) -> None:
    _, history = await recorded(stack, steps)
    called = list(CALLED)
    report = await replay_async(history, steps_handler(steps))
    assert report.ok and report.outcome == "stopped", report
    assert report.stopped_at == "w|signal:go:1"
    assert report.steps == [step for step in report.recorded if step]
    assert called == CALLED


async def test_a_finished_run_replays_to_completion_with_its_recorded_results(
    stack: TestStack,
) -> None:
    run_id, _ = await recorded(stack, "e:a,w:go,e:b")
    await stack.signal(run_id, "go", {"n": 1})
    done = await stack.settle(run_id)
    assert done.status == "succeeded"
    history = await export(stack, run_id)
    called = list(CALLED)
    report = await replay_async(history, kit_handlers.kit_steps)
    assert report.outcome == "completed" and report.output == done.output
    assert called == CALLED
    # a handler that now ends before its recorded steps: the drift the live check reports
    short = await replay_async(history, steps_handler("e:a,w:go"))
    assert short.drift is not None
    assert short.drift.details["taken"] == "(the handler returned)"


async def test_a_new_step_past_the_history_is_where_the_replay_stops(stack: TestStack) -> None:
    _, history = await recorded(stack, "e:a,w:go")
    report = await replay_async(history, steps_handler("e:a,w:go,e:c"))
    assert report.ok and report.stopped_at == "w|signal:go:1"
