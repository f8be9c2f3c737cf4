"""Checkpoints, effect records, the reconciler's effect rule and resolve, on a real Redis."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from app.errors import InvalidTransition, LeaseLost, RunNotFound
from app.models import RunStatus
from app.models.read import ResolveRequest
from app.store.leases.store import ClaimedRun, Lease, LeaseStore, Outcome
from app.store.lua.transition import LeaseAnswer
from app.store.progress.store import (
    EffectAnswer,
    EffectCall,
    EffectOutcome,
    EffectStart,
    ProgressStore,
)
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.reconciliation import park_on_unknown_effect

OWNER_A = "w-a"
OWNER_B = "w-b"


async def claimed_run(
    run_store: RunStore, lease_store: LeaseStore, owner: str = OWNER_A, **options: object
) -> ClaimedRun:
    await run_store.create(NewRun(handler="demo.echo", input={}, **options))  # type: ignore[arg-type]
    return (await lease_store.claim("default", owner, 1)).runs[0]


async def reclaim(lease_store: LeaseStore, run: ClaimedRun) -> ClaimedRun:
    """Hand A's run to B (release + claim): a new fence, as after a takeover."""
    await lease_store.release([Lease("default", run.id, OWNER_A, run.fence)], "drain")
    again = (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    assert again.id == run.id
    return again


async def events(run_store: RunStore, run_id: str) -> list[tuple[str, dict[str, object]]]:
    return [(event.type, event.data) for event in await run_store.read_events(run_id)]


def charge(run: ClaimedRun, *, idempotent: bool = False, ordinal: int = 1) -> EffectCall:
    return EffectCall(run.id, "charge", ordinal, idempotent)


async def start(
    progress: ProgressStore, run: ClaimedRun, call: EffectCall, owner: str = OWNER_A
) -> EffectStart:
    return await progress.start_effect(Lease("default", call.run_id, owner, run.fence), call)


async def record(
    progress: ProgressStore,
    run: ClaimedRun,
    call: EffectCall,
    result: object,
    owner: str = OWNER_A,
) -> bool:
    return await progress.record_effect(
        Lease("default", call.run_id, owner, run.fence),
        call,
        EffectOutcome.APPLIED,
        json.dumps(result),
    )


async def checkpoint(
    progress: ProgressStore, run: ClaimedRun, state_json: str, effect_seq_json: str = ""
) -> int:
    """Owner A checkpoints ``run`` at the fence it claimed it with."""
    return await progress.checkpoint(
        Lease("default", run.id, OWNER_A, run.fence),
        state_json=state_json,
        effect_seq_json=effect_seq_json,
    )


async def expire_and_reconcile(lease_store: LeaseStore) -> list[tuple[str, str]]:
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    return [(a.run_id, a.action) for a in await lease_store.reconcile("default")]


async def test_checkpoint_with_current_fence_stores_state_for_the_next_attempt(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    seq = await checkpoint(progress, run, '{"step":3}')
    assert seq == 1
    assert (await events(run_store, run.id))[-1] == ("checkpoint", {"seq": 1, "size_bytes": 10})
    again = await reclaim(lease_store, run)
    assert again.state == {"step": 3}


async def test_checkpoint_with_stale_fence_is_lost_and_changes_nothing(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    await checkpoint(progress, run, '"mine"')
    new = await reclaim(lease_store, run)
    before = await events(run_store, run.id)
    with pytest.raises(LeaseLost):
        await checkpoint(progress, run, '"stale"')
    assert await events(run_store, run.id) == before
    assert new.state == "mine"


async def test_checkpoint_saves_effect_ordinals_with_the_state(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    await checkpoint(progress, run, "1", '{"charge":2}')
    await checkpoint(progress, run, "2")
    assert await progress.effect_seq("default", run.id) == {"charge": 2}


async def test_a_recorded_effect_is_replayed_to_the_next_owner(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    call = charge(run)
    started = await start(progress, run, call)
    assert (started.answer, started.starts) == (EffectAnswer.STARTED, 1)
    assert await record(progress, run, call, {"charged": 12345678901234567}) is True
    new = await reclaim(lease_store, run)
    replay = await start(progress, new, charge(new), owner=OWNER_B)
    assert replay.answer == EffectAnswer.REPLAYED
    # the result comes back byte for byte: Lua never re-encodes a handler's numbers
    assert json.loads(replay.result_json) == {"charged": 12345678901234567}
    phases = [data["phase"] for kind, data in await events(run_store, run.id) if kind == "effect"]
    assert phases == ["started", "recorded", "replayed"]


async def test_an_unknown_non_idempotent_effect_parks_the_run_with_evidence(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    await start(progress, run, charge(run))
    new = await reclaim(lease_store, run)
    answer = await start(progress, new, charge(new), owner=OWNER_B)
    assert answer.answer == EffectAnswer.UNKNOWN
    assert answer.record is not None and answer.record["key"] == f"{run.id}:charge:1"
    parked = await run_store.get(run.id)
    assert parked.status == RunStatus.RECONCILIATION_REQUIRED
    assert parked.fence == new.fence + 1
    assert parked.owner_id is None
    assert parked.error is not None
    assert parked.error.code == "effect_outcome_unknown"
    effect = parked.error.details["effect"]
    assert (effect["name"], effect["key"], effect["fence"]) == (
        "charge",
        f"{run.id}:charge:1",
        run.fence,
    )
    assert parked.error.details["detected_by"] == "executor"
    assert (await events(run_store, run.id))[-1][0] == "reconciliation_required"
    # the parked run's owner can write nothing more
    codes, _ = await lease_store.finish_and_claim(
        "default", OWNER_B, [Outcome(new.lease, RunStatus.SUCCEEDED)], 0
    )
    assert codes == [LeaseAnswer.LOST]
    assert (await lease_store.claim("default", OWNER_A, 1)).runs == []


async def test_an_unknown_idempotent_effect_is_started_again_with_the_same_key(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    await start(progress, run, charge(run, idempotent=True))
    new = await reclaim(lease_store, run)
    again = await start(progress, new, charge(new, idempotent=True), owner=OWNER_B)
    assert (again.answer, again.starts) == (EffectAnswer.STARTED, 2)
    records = await progress.effects("default", run.id)
    assert records["charge:1"]["fence"] == new.fence
    assert records["charge:1"]["key"] == f"{run.id}:charge:1"


async def test_a_stale_owner_cannot_start_or_record_an_effect(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    call = charge(run, idempotent=True)
    await start(progress, run, call)
    new = await reclaim(lease_store, run)
    await start(progress, new, call, owner=OWNER_B)
    assert await record(progress, new, call, "new owner's", owner=OWNER_B) is True
    with pytest.raises(LeaseLost):
        await record(progress, run, call, "stale owner's")
    with pytest.raises(LeaseLost):
        await start(progress, run, charge(run, ordinal=2))
    records = await progress.effects("default", run.id)
    assert records["charge:1"]["result"] == "new owner's"
    assert "charge:2" not in records


async def test_not_applied_drops_the_record_so_the_effect_runs_again(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    call = charge(run)
    await start(progress, run, call)
    assert await progress.record_effect(
        Lease("default", call.run_id, OWNER_A, run.fence), call, EffectOutcome.NOT_APPLIED
    )
    new = await reclaim(lease_store, run)
    assert (await start(progress, new, charge(new), owner=OWNER_B)).starts == 1


async def test_recording_an_effect_that_was_not_started_is_invalid(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    assert await record(progress, run, charge(run), 1) is False


async def test_reconciler_parks_an_expired_run_with_an_unknown_effect_despite_retry(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store, on_lease_expired="retry", max_attempts=3)
    await start(progress, run, charge(run))
    assert await expire_and_reconcile(lease_store) == [(run.id, "reconciliation_required")]
    parked = await run_store.get(run.id)
    assert parked.status == RunStatus.RECONCILIATION_REQUIRED
    assert parked.error is not None
    details = parked.error.details
    assert details["detected_by"] == "reconciler"
    assert details["effect"]["key"] == f"{run.id}:charge:1"
    assert details["owner_id"] == OWNER_A and details["fence"] == run.fence
    assert "lease_expires_at_ms" in details
    assert await lease_store.reconcile("default") == []


async def test_reconciler_retries_a_run_whose_unknown_effect_is_idempotent(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store, on_lease_expired="retry", max_attempts=3)
    await start(progress, run, charge(run, idempotent=True))
    assert await expire_and_reconcile(lease_store) == [(run.id, "requeued")]


async def test_reconciler_ignores_effects_whose_outcome_was_recorded(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    call = charge(run)
    await start(progress, run, call)
    await record(progress, run, call, "ok")
    assert await expire_and_reconcile(lease_store) == [(run.id, "orphaned")]


async def test_reconciler_cancels_a_cancelling_run_and_keeps_the_unknown_effect_as_evidence(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    await start(progress, run, charge(run))
    await run_store.cancel(run.id)
    assert await expire_and_reconcile(lease_store) == [(run.id, "cancelled")]
    kind, data = (await events(run_store, run.id))[-1]
    assert kind == "cancelled"
    assert data["evidence"]["unknown_effects"][0]["name"] == "charge"  # type: ignore[index]


async def parked_run(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> ClaimedRun:
    """A run stuck on an unknown charge: started by A, found by B."""
    return await park_on_unknown_effect(run_store, lease_store, progress)


async def test_resolve_retry_applied_records_the_effect_and_queues_with_a_new_fence(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    stuck = await parked_run(run_store, lease_store, progress)
    fence_parked = (await run_store.get(stuck.id)).fence
    run = await run_store.resolve(
        stuck.id,
        ResolveRequest(
            action="retry",
            effect_outcome="applied",
            effect_result={"id": "ch_1"},
            note="seen in Stripe",
        ),
    )
    assert run.status == RunStatus.QUEUED
    assert run.fence == fence_parked + 1
    assert run.error is None
    kind, data = (await events(run_store, stuck.id))[-1]
    assert kind == "resolved"
    assert data == {
        "action": "retry",
        "effect_outcome": "applied",
        "effects": [f"{stuck.id}:charge:1"],
        "note": "seen in Stripe",
    }
    again = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    replay = await start(progress, again, charge(again))
    assert replay.answer == EffectAnswer.REPLAYED
    assert json.loads(replay.result_json) == {"id": "ch_1"}


async def test_resolve_retry_not_applied_lets_the_effect_run_again(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    stuck = await parked_run(run_store, lease_store, progress)
    await run_store.resolve(stuck.id, ResolveRequest(action="retry", effect_outcome="not_applied"))
    again = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert (await start(progress, again, charge(again))).answer == EffectAnswer.STARTED


async def test_resolve_succeed_ends_the_run_with_the_output(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    stuck = await parked_run(run_store, lease_store, progress)
    run = await run_store.resolve(stuck.id, ResolveRequest(action="succeed", output={"done": True}))
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"done": True}
    assert [kind for kind, _ in await events(run_store, stuck.id)][-2:] == ["resolved", "succeeded"]


async def test_resolve_fail_ends_the_run_failed_with_the_earlier_evidence(
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    redis_client: aioredis.Redis,
) -> None:
    stuck = await parked_run(run_store, lease_store, progress)
    run = await run_store.resolve(stuck.id, ResolveRequest(action="fail", effect_outcome="applied"))
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "resolved_as_failed"
    assert run.error.details["previous_error"]["code"] == "effect_outcome_unknown"
    assert [kind for kind, _ in await events(run_store, stuck.id)][-2:] == ["resolved", "failed"]
    # ended: its effects expire with it
    assert await redis_client.pttl(lease_store.keys("default").effects(stuck.id)) > 0


async def test_resolve_of_a_run_in_any_other_state_is_an_invalid_transition(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    with pytest.raises(InvalidTransition):
        await run_store.resolve(run.id, ResolveRequest(action="fail"))
    with pytest.raises(RunNotFound):
        await run_store.resolve("default.01J00000000000000000000000", ResolveRequest(action="fail"))


async def test_every_way_a_run_ends_expires_its_effects(
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    redis_client: aioredis.Redis,
) -> None:
    keys = lease_store.keys("default")
    finished = await claimed_run(run_store, lease_store)
    await start(progress, finished, charge(finished, idempotent=True))
    await lease_store.finish_and_claim(
        "default", OWNER_A, [Outcome(finished.lease, RunStatus.SUCCEEDED)], 0
    )
    orphaned = await claimed_run(run_store, lease_store)
    await start(progress, orphaned, charge(orphaned, idempotent=True))
    await expire_and_reconcile(lease_store)
    cancelled = await parked_run(run_store, lease_store, progress)
    await run_store.cancel(cancelled.id)
    for run in (finished, orphaned, cancelled):
        assert await redis_client.pttl(keys.effects(run.id)) > 0, run.id


async def test_a_repeated_start_or_record_by_the_same_owner_is_taken_as_done(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    """A write retried after a lost reply must neither park the run nor fail."""
    run = await claimed_run(run_store, lease_store)
    call = charge(run)
    await start(progress, run, call)
    again = await start(progress, run, call)
    assert (again.answer, again.starts) == (EffectAnswer.STARTED, 1)
    assert await record(progress, run, call, "ok") is True
    assert await record(progress, run, call, "ok") is True
    assert (await run_store.get(run.id)).status == RunStatus.RUNNING
    phases = [data["phase"] for kind, data in await events(run_store, run.id) if kind == "effect"]
    assert phases == ["started", "recorded"]


async def test_a_run_resumed_after_waiting_for_a_person_keeps_its_checkpoint_and_effects(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    run = await claimed_run(run_store, lease_store)
    call = charge(run)
    await start(progress, run, call)
    await record(progress, run, call, {"id": "ch_1"})
    await checkpoint(progress, run, '{"step":1}', '{"charge":1}')
    escalation = json.dumps({"reason": "stuck", "evidence": {}})
    codes, _ = await lease_store.finish_and_claim(
        "default", OWNER_A, [Outcome(run.lease, RunStatus.WAITING_HUMAN, output_json=escalation)], 0
    )
    assert codes == [LeaseAnswer.OK]
    await run_store.resume(run.id, {"go": True})
    resumed = (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    assert resumed.fence > run.fence
    assert resumed.state == {"step": 1}
    assert await progress.effect_seq("default", run.id) == {"charge": 1}
    replay = await start(progress, resumed, charge(resumed), owner=OWNER_B)
    assert replay.answer == EffectAnswer.REPLAYED
    assert json.loads(replay.result_json) == {"id": "ch_1"}
