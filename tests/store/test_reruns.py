"""retry_run on a real Redis: a new linked run, the old stream untouched, effects inherited."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.errors import AlreadyRetried, IdempotencyConflict, InvalidTransition, RunNotFound
from app.models import TERMINAL_EVENT_TYPES, RunStatus
from app.store.keys import QueueKeys
from app.store.leases.store import Lease, LeaseStore, Outcome
from app.store.progress.store import EffectAnswer, EffectCall, EffectOutcome, ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.reruns import Rerun, retry_run
from app.store.runs.store import RunStore

OWNER = "w-1"


async def ended(
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    *,
    status: str = "failed",
    charge: bool = True,
) -> str:
    """A run that charged once (recorded), checkpointed, then ended ``status``."""
    created = await run_store.create(
        NewRun(handler="demo.echo", input={"n": 1}, metadata={"tenant": "acme"}, max_attempts=2)
    )
    run = (await lease_store.claim("default", OWNER, 1)).runs[0]
    if charge:
        call = EffectCall(run.id, "charge", 1, idempotent=False)
        await progress.start_effect(Lease("default", call.run_id, OWNER, run.fence), call)
        await progress.record_effect(
            Lease("default", call.run_id, OWNER, run.fence),
            call,
            EffectOutcome.APPLIED,
            '{"receipt":"r-1"}',
        )
        await progress.checkpoint(
            Lease("default", run.id, OWNER, run.fence),
            state_json='{"step":1}',
            effect_seq_json='{"charge":1}',
        )
    outcome = Outcome(run.lease, RunStatus(status), error_json='{"code":"boom","message":"m"}')
    await lease_store.finish_and_claim("default", OWNER, [outcome], 0)
    return created.run.id


async def test_a_retry_is_a_new_queued_run_linked_both_ways(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress)
    before = await run_store.read_events(old_id)
    retried = await retry_run(run_store, Rerun(old_id))
    new = retried.run
    assert not retried.replayed
    assert new.id != old_id and new.status == RunStatus.QUEUED
    assert (new.handler, new.input, new.metadata, new.max_attempts) == (
        "demo.echo",
        {"n": 1},
        {"tenant": "acme"},
        2,
    )
    assert new.retry_of == old_id
    old = await run_store.get(old_id)
    assert old.retried_by == new.id and old.status == RunStatus.FAILED
    # the old stream is exactly as it was: it still ends with its one terminal event
    after = await run_store.read_events(old_id)
    assert after == before
    assert after[-1].type == "failed"
    assert [e.type for e in after if e.type in TERMINAL_EVENT_TYPES] == ["failed"]
    (created,) = await run_store.read_events(new.id)
    assert created.type == "created" and created.data["retry_of"] == old_id


async def test_the_new_run_replays_the_old_runs_effects_under_the_first_runs_key(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress)
    new_id = (await retry_run(run_store, Rerun(old_id))).run.id
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert claimed.id == new_id
    assert claimed.state == {"step": 1}  # checkpoint kept by default
    seq, root = await progress.effect_start("default", new_id)
    assert (seq, root) == ({"charge": 1}, old_id)
    again = EffectCall(new_id, "charge", 1, idempotent=False, key_root=root)
    assert again.key == f"{old_id}:charge:1"
    started = await progress.start_effect(
        Lease("default", again.run_id, OWNER, claimed.fence), again
    )
    assert started.answer == EffectAnswer.REPLAYED and started.result_json == '{"receipt":"r-1"}'


async def test_checkpoint_drop_starts_from_the_beginning_but_still_replays_effects(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress)
    new_id = (await retry_run(run_store, Rerun(old_id, checkpoint="drop"))).run.id
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert claimed.state is None
    assert await progress.effect_start("default", new_id) == ({}, old_id)
    first = EffectCall(new_id, "charge", 1, idempotent=False, key_root=old_id)
    started = await progress.start_effect(
        Lease("default", first.run_id, OWNER, claimed.fence), first
    )
    assert started.answer == EffectAnswer.REPLAYED


async def test_the_same_idempotency_key_gives_the_same_new_run_and_another_retry_is_refused(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress)
    first = await retry_run(run_store, Rerun(old_id, idempotency_key="fix-1"))
    again = await retry_run(run_store, Rerun(old_id, idempotency_key="fix-1"))
    assert again.replayed and again.run.id == first.run.id
    with pytest.raises(AlreadyRetried) as caught:
        await retry_run(run_store, Rerun(old_id))
    assert caught.value.retried_by == first.run.id
    with pytest.raises(AlreadyRetried):
        await retry_run(run_store, Rerun(old_id, idempotency_key="fix-2"))
    with pytest.raises(IdempotencyConflict):  # the key names a retry of the same run with drop
        await retry_run(run_store, Rerun(old_id, checkpoint="drop", idempotency_key="fix-1"))


async def test_a_retry_of_a_retry_keeps_the_first_runs_key_root(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    first_id = await ended(run_store, lease_store, progress)
    second_id = (await retry_run(run_store, Rerun(first_id))).run.id
    second = (await lease_store.claim("default", OWNER, 1)).runs[0]
    await lease_store.finish_and_claim(
        "default", OWNER, [Outcome(second.lease, RunStatus.FAILED, error_json="{}")], 0
    )
    third_id = (await retry_run(run_store, Rerun(second_id))).run.id
    assert (await run_store.get(third_id)).retry_of == second_id
    assert (await progress.effect_start("default", third_id))[1] == first_id
    assert (await progress.effects("default", third_id))["charge:1"]["result"] == {"receipt": "r-1"}


async def test_once_the_re_run_is_deleted_the_old_run_may_be_retried_again(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress)
    gone = (await retry_run(run_store, Rerun(old_id))).run.id
    await run_store.cancel(gone)
    await run_store.delete(gone)
    again = await retry_run(run_store, Rerun(old_id))
    assert again.run.id != gone
    assert (await run_store.get(old_id)).retried_by == again.run.id


@pytest.mark.parametrize("status", ["failed", "cancelled"])
async def test_failed_and_cancelled_runs_can_be_retried(
    status: str, run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    old_id = await ended(run_store, lease_store, progress, status=status, charge=False)
    assert (await retry_run(run_store, Rerun(old_id))).run.retry_of == old_id


async def test_live_succeeded_and_unknown_runs_are_refused_and_nothing_is_created(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    done = await ended(run_store, lease_store, progress, status="succeeded", charge=False)
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    with pytest.raises(InvalidTransition, match="queued"):
        await retry_run(run_store, Rerun(queued))
    with pytest.raises(InvalidTransition, match="succeeded"):
        await retry_run(run_store, Rerun(done))
    with pytest.raises(RunNotFound):
        await retry_run(run_store, Rerun("default.01J00000000000000000000000"))
    with pytest.raises(RunNotFound):
        await retry_run(run_store, Rerun("not-a-run-id"))
    page = await run_store.list_runs(queue="default", limit=50)
    assert {run.id for run in page.items} == {queued, done}
    assert (await run_store.get(queued)).retried_by is None


async def test_orphaned_and_expired_runs_can_be_retried(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    keys = run_store.keys("default")
    held = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert claimed.id == held
    # its lease ran out long ago, by the Redis clock: the reconciler orphans it
    await redis_client.hset(keys.run(held), "lease_expires_at", 1)
    await redis_client.zadd(keys.leases, {held: 1})
    await lease_store.reconcile("default")
    unclaimed = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    await redis_client.zadd(keys.unclaimed, {unclaimed: 1})  # its queued TTL ran out
    await lease_store.expire_queued("default")
    for run_id, status in ((held, RunStatus.ORPHANED), (unclaimed, RunStatus.EXPIRED)):
        assert (await run_store.get(run_id)).status == status
        assert (await retry_run(run_store, Rerun(run_id))).run.retry_of == run_id


async def test_a_re_run_keeps_the_old_runs_start_rate_limits(
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    redis_client: aioredis.Redis,
) -> None:
    old_id = await ended(run_store, lease_store, progress, charge=False)
    gate = '[{"bucket":"openai","cost":1}]'
    await redis_client.hset(run_store.keys("default").run(old_id), "rate_limits", gate)
    new_id = (await retry_run(run_store, Rerun(old_id))).run.id
    assert await redis_client.hget(run_store.keys("default").run(new_id), "rate_limits") == gate


async def test_an_effect_the_old_run_started_but_never_recorded_is_not_started_again(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    """The same worker claims the re-run: its first fence must not pass for the old start."""
    created = await run_store.create(NewRun(handler="demo.echo", input={}, max_attempts=1))
    run = (await lease_store.claim("default", OWNER, 1)).runs[0]
    call = EffectCall(run.id, "charge", 1, idempotent=False)
    await progress.start_effect(Lease("default", run.id, OWNER, run.fence), call)
    # cut mid-effect: the run ends before the charge's outcome is recorded
    outcome = Outcome(run.lease, RunStatus.FAILED, error_json='{"code":"boom","message":"m"}')
    await lease_store.finish_and_claim("default", OWNER, [outcome], 0)
    new_id = (await retry_run(run_store, Rerun(created.run.id))).run.id
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert claimed.id == new_id and claimed.fence > run.fence
    again = EffectCall(new_id, "charge", 1, idempotent=False, key_root=created.run.id)
    started = await progress.start_effect(Lease("default", new_id, OWNER, claimed.fence), again)
    assert started.answer == EffectAnswer.UNKNOWN


async def test_a_queued_re_run_nobody_claims_expires_by_its_queued_ttl(
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    redis_client: aioredis.Redis,
    prefix: str,
) -> None:
    # a re-run's fence goes on from its old run's (7912d97), so "never claimed" cannot
    # be read from fence 0: expire_queued must still end a re-run nobody claimed
    old_id = await ended(run_store, lease_store, progress)
    new = (await retry_run(run_store, Rerun(old_id))).run
    keys = QueueKeys(prefix, "default")
    assert int(await redis_client.hget(keys.run(new.id), "fence")) > 0
    await redis_client.zadd(keys.unclaimed, {new.id: 1})  # its queued TTL has passed
    actions = await lease_store.expire_queued("default")
    assert [(a.run_id, a.action) for a in actions] == [(new.id, "expired")]
    expired = await run_store.get(new.id)
    assert expired.status == RunStatus.EXPIRED
    assert expired.error is not None and expired.error.code == "queued_ttl_expired"
    assert [e.type for e in await run_store.read_events(new.id)] == ["created", "expired"]
    assert (await lease_store.claim("default", OWNER, 5)).runs == []


async def test_replace_queued_supersedes_a_queued_re_run_of_its_singleton_key(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    created = await run_store.create(NewRun(handler="demo.echo", input={}, singleton_key="t"))
    run = (await lease_store.claim("default", OWNER, 1)).runs[0]
    outcome = Outcome(run.lease, RunStatus.FAILED, error_json='{"code":"boom","message":"m"}')
    await lease_store.finish_and_claim("default", OWNER, [outcome], 0)
    rerun = (await retry_run(run_store, Rerun(created.run.id))).run
    newest = await run_store.create(
        NewRun(handler="demo.echo", input={}, singleton_key="t", on_conflict="replace_queued")
    )
    gone = await run_store.get(rerun.id)
    assert gone.status == RunStatus.CANCELLED
    assert gone.error is not None and gone.error.code == "superseded"
    claimed = (await lease_store.claim("default", OWNER, 5)).runs
    assert [r.id for r in claimed] == [newest.run.id]
