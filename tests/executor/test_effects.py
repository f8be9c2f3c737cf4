"""The effect ledger in-process, on a real Redis: keys, replay, errors, ordering."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from app.errors import (
    CheckpointTooLarge,
    EffectNotApplied,
    EffectOutcomeUnknown,
    InvalidCheckpoint,
    InvalidEffect,
    InvalidEffectResult,
    LeaseLost,
)
from app.executor.effects import EffectLedger
from app.executor.events import EventSink
from app.models import RunStatus
from app.store.leases.store import ClaimedRun, LeaseStore
from app.store.progress.store import ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually

MAX_BYTES = 256


@dataclass
class Attempt:
    """One owner's execution of a run: its ledger, its sink and what it was told."""

    owner: str
    run: ClaimedRun
    ledger: EffectLedger
    sink: EventSink
    stops: list[str] = field(default_factory=list)


AttemptFactory = Callable[[str], Awaitable[Attempt]]


@pytest.fixture
def attempt(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> AttemptFactory:
    """Claim the test's run as ``owner`` (releasing it from the previous owner first)."""
    current: list[Attempt] = []

    async def claim(owner: str) -> Attempt:
        if not current:
            await run_store.create(NewRun(handler="demo.echo", input={}))
        else:
            prev = current[-1]
            await lease_store.release([prev.run.lease], "drain")
        run = (await lease_store.claim("default", owner, 1)).runs[0]
        stops: list[str] = []
        sink = EventSink(
            lease_store,
            run.lease,
            max_event_bytes=1000,
            on_lost=lambda: stops.append("lost"),
        )
        ledger = EffectLedger(
            progress,
            run.lease,
            sink=sink,
            max_bytes=MAX_BYTES,
            on_lost=lambda: stops.append("lost"),
            on_parked=lambda: stops.append("parked"),
        )
        current.append(Attempt(owner, run, ledger, sink, stops))
        return current[-1]

    return claim


class Downstream:
    """A fake payment API: counts calls and remembers the keys it was given."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def charge(self, key: str) -> dict[str, object]:
        self.keys.append(key)
        return {"charge": len(self.keys), "thread": threading.current_thread().name}

    async def acharge(self, key: str) -> dict[str, object]:
        self.keys.append(key)
        return {"charge": len(self.keys)}


async def test_keys_count_calls_per_name_and_sync_functions_run_off_the_loop(
    attempt: AttemptFactory,
) -> None:
    a = await attempt("w-a")
    api = Downstream()
    first = await a.ledger.effect("charge", api.charge)
    await a.ledger.effect("email", api.acharge)
    await a.ledger.effect("charge", api.charge)
    run_id = a.run.id
    assert api.keys == [f"{run_id}:charge:1", f"{run_id}:email:1", f"{run_id}:charge:2"]
    assert first["thread"] != threading.current_thread().name


async def test_a_later_attempt_replays_recorded_results_without_calling_again(
    attempt: AttemptFactory,
) -> None:
    a = await attempt("w-a")
    api = Downstream()
    first = await a.ledger.effect("charge", api.acharge)
    b = await attempt("w-b")
    again = await b.ledger.effect("charge", api.acharge)
    assert again == first
    assert len(api.keys) == 1


async def test_the_result_is_its_json_round_trip_on_the_first_attempt_too(
    attempt: AttemptFactory,
) -> None:
    a = await attempt("w-a")
    assert await a.ledger.effect("pair", lambda key: (1, 2)) == [1, 2]


async def test_a_lambda_wrapping_an_async_call_is_awaited(attempt: AttemptFactory) -> None:
    a = await attempt("w-a")
    api = Downstream()
    assert await a.ledger.effect("charge", lambda key: api.acharge(key)) == {"charge": 1}


async def test_ordinals_resume_from_the_last_checkpoint(attempt: AttemptFactory) -> None:
    a = await attempt("w-a")
    api = Downstream()
    await a.ledger.effect("charge", api.acharge)
    await a.ledger.checkpoint({"step": 1})
    await a.ledger.effect("charge", api.acharge)
    # the next attempt resumes after the checkpoint: its first call is the second charge
    b = await attempt("w-b")
    assert b.run.state == {"step": 1}
    assert await b.ledger.effect("charge", api.acharge) == {"charge": 2}
    await b.ledger.effect("charge", api.acharge)
    assert api.keys[-1].endswith(":charge:3")


async def test_checkpoint_flushes_earlier_events_first(
    attempt: AttemptFactory, run_store: RunStore
) -> None:
    a = await attempt("w-a")
    await a.sink.add("progress", {"n": 1})
    await a.ledger.checkpoint({"n": 1})
    kinds = [event.type for event in await run_store.read_events(a.run.id)]
    assert kinds[-2:] == ["progress", "checkpoint"]


async def test_state_that_is_too_large_or_not_json_is_refused_before_writing(
    attempt: AttemptFactory, run_store: RunStore
) -> None:
    a = await attempt("w-a")
    with pytest.raises(CheckpointTooLarge) as too_large:
        await a.ledger.checkpoint({"blob": "x" * MAX_BYTES})
    assert too_large.value.code == "checkpoint_too_large"
    assert not too_large.value.retryable
    with pytest.raises(InvalidCheckpoint):
        await a.ledger.checkpoint({"set": {1, 2}})
    kinds = [event.type for event in await run_store.read_events(a.run.id)]
    assert "checkpoint" not in kinds


async def test_a_malformed_effect_name_is_refused(attempt: AttemptFactory) -> None:
    a = await attempt("w-a")
    with pytest.raises(InvalidEffect):
        await a.ledger.effect("has space", lambda key: 1)


async def test_a_result_that_cannot_be_recorded_leaves_the_outcome_unknown(
    attempt: AttemptFactory, progress: ProgressStore
) -> None:
    a = await attempt("w-a")
    with pytest.raises(InvalidEffectResult):
        await a.ledger.effect("charge", lambda key: object())
    records = await progress.effects("default", a.run.id)
    assert records["charge:1"]["status"] == "started"


async def test_effect_not_applied_drops_the_record_so_a_later_attempt_runs_it(
    attempt: AttemptFactory,
) -> None:
    a = await attempt("w-a")

    def declined(key: str) -> None:
        raise EffectNotApplied("card declined")

    with pytest.raises(EffectNotApplied):
        await a.ledger.effect("charge", declined)
    b = await attempt("w-b")
    api = Downstream()
    await b.ledger.effect("charge", api.acharge)
    assert api.keys == [f"{a.run.id}:charge:1"]


async def test_an_unknown_outcome_stops_the_handler_and_parks_the_run(
    attempt: AttemptFactory, run_store: RunStore, progress: ProgressStore
) -> None:
    a = await attempt("w-a")

    async def dies_mid_call(key: str) -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(a.ledger.effect("charge", dies_mid_call))
    await eventually(
        lambda: progress.effects("default", a.run.id),
        until=lambda records: "charge:1" in records,
        what="the effect to start",
    )
    task.cancel()
    b = await attempt("w-b")
    with pytest.raises(EffectOutcomeUnknown) as unknown:
        await b.ledger.effect("charge", Downstream().acharge)
    assert unknown.value.record["key"] == f"{a.run.id}:charge:1"
    assert b.stops == ["parked"]
    assert (await run_store.get(a.run.id)).status == RunStatus.RECONCILIATION_REQUIRED


async def test_a_fenced_out_owner_gets_lease_lost_and_is_stopped(attempt: AttemptFactory) -> None:
    a = await attempt("w-a")
    await attempt("w-b")
    with pytest.raises(LeaseLost):
        await a.ledger.checkpoint({"n": 1})
    with pytest.raises(LeaseLost):
        await a.ledger.effect("charge", Downstream().acharge)
    assert a.stops == ["lost", "lost"]


async def test_a_stale_owner_whose_effect_returns_after_a_takeover_records_nothing(
    attempt: AttemptFactory, progress: ProgressStore
) -> None:
    a = await attempt("w-a")
    release = asyncio.Event()

    async def slow_charge(key: str) -> str:
        await release.wait()
        return "stale owner's result"

    stale = asyncio.create_task(a.ledger.effect("charge", slow_charge, idempotent=True))
    await eventually(
        lambda: progress.effects("default", a.run.id),
        until=lambda records: "charge:1" in records,
        what="the effect to start",
    )
    b = await attempt("w-b")
    assert await b.ledger.effect("charge", lambda key: "new owner's result", idempotent=True) == (
        "new owner's result"
    )
    release.set()
    with pytest.raises(LeaseLost):
        await stale
    assert a.stops == ["lost"]
    records = await progress.effects("default", a.run.id)
    assert records["charge:1"]["result"] == "new owner's result"


async def test_the_result_is_recorded_even_when_the_run_is_cancelled_meanwhile(
    attempt: AttemptFactory, progress: ProgressStore
) -> None:
    a = await attempt("w-a")
    api = Downstream()

    async def charge_then_get_cancelled(key: str) -> dict[str, object]:
        result = await api.acharge(key)
        # a drain arrives just as the side effect returns, before its result is written
        asyncio.get_running_loop().call_soon(task.cancel)
        return result

    task = asyncio.create_task(a.ledger.effect("charge", charge_then_get_cancelled))
    with pytest.raises(asyncio.CancelledError):
        await task
    records = await eventually(
        lambda: progress.effects("default", a.run.id),
        until=lambda records: records["charge:1"]["status"] == "done",
        what="the shielded result write",
    )
    assert records["charge:1"]["result"]["charge"] == 1


async def test_concurrent_first_calls_of_one_name_get_distinct_keys(
    attempt: AttemptFactory,
) -> None:
    a = await attempt("w-a")
    api = Downstream()
    await asyncio.gather(*(a.ledger.effect("charge", api.acharge) for _ in range(3)))
    assert sorted(api.keys) == [f"{a.run.id}:charge:{n}" for n in (1, 2, 3)]
