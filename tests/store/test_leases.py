"""Lease semantics of the Lua transitions, against a real redis-server."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from app.errors import LeaseLost
from app.models import RunStatus
from app.store.context import StoreContext
from app.store.leases.store import Lease, LeaseRenewer, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.redis.connection import sync_client
from app.store.retention import Retention
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually

OWNER_A = "w-a"
OWNER_B = "w-b"


async def create(run_store: RunStore, **options: object) -> str:
    created = await run_store.create(NewRun(handler="demo.echo", input={"n": 1}, **options))  # type: ignore[arg-type]
    return created.run.id


async def event_types(run_store: RunStore, run_id: str) -> list[str]:
    return [event.type for event in await run_store.read_events(run_id)]


def renewer(redis_url: str, scripts: Scripts, lease_store: LeaseStore) -> LeaseRenewer:
    return LeaseRenewer(
        sync_client(redis_url),
        scripts=scripts,
        prefix=lease_store.prefix,
        lease_ttl_ms=lease_store.lease_ttl_ms,
    )


async def test_claim_moves_a_run_to_running_with_fence_one(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    claim = await lease_store.claim("default", OWNER_A, 10)
    assert [run.id for run in claim.runs] == [run_id]
    assert claim.runs[0].fence == 1
    run = await run_store.get(run_id)
    assert run.status == RunStatus.RUNNING
    assert run.owner_id == OWNER_A
    assert run.lease_expires_at is not None
    assert await event_types(run_store, run_id) == ["created", "claimed"]


async def test_a_run_is_claimed_by_one_owner_only(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = {await create(run_store) for _ in range(50)}
    claims = await asyncio.gather(*[lease_store.claim("default", f"w-{i}", 7) for i in range(10)])
    claimed = [run.id for claim in claims for run in claim.runs]
    assert sorted(claimed) == sorted(ids)


async def test_finish_with_current_fence_writes_output_and_terminal_event(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    codes, _ = await lease_store.finish_and_claim(
        "default", OWNER_A, [Outcome(run.lease, RunStatus.SUCCEEDED, output_json='{"ok":true}')], 0
    )
    assert codes == [LeaseAnswer.OK]
    stored = await run_store.get(run_id)
    assert stored.status == RunStatus.SUCCEEDED
    assert stored.output == {"ok": True}
    assert (await event_types(run_store, run_id))[-1] == "succeeded"


async def test_a_finish_sent_again_after_a_lost_reply_is_answered_ok_and_written_once(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    outcome = Outcome(run.lease, RunStatus.SUCCEEDED, output_json='{"ok":true}')
    first, _ = await lease_store.finish_and_claim("default", OWNER_A, [outcome], 0)
    again, _ = await lease_store.finish_and_claim("default", OWNER_A, [outcome], 0)
    assert first == again == [LeaseAnswer.OK]
    assert await event_types(run_store, run_id) == ["created", "claimed", "succeeded"]
    # another outcome, or another owner, under that fence is not the same write
    failed = Outcome(run.lease, RunStatus.FAILED, error_json='{"code":"x","message":"x"}')
    assert (await lease_store.finish_and_claim("default", OWNER_A, [failed], 0))[0] == [
        LeaseAnswer.LOST
    ]
    assert (await lease_store.finish_and_claim("default", OWNER_B, [outcome], 0))[0] == [
        LeaseAnswer.LOST
    ]
    assert (await run_store.get(run_id)).output == {"ok": True}


async def test_renew_with_stale_fence_returns_lost(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    answers = renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run.id, OWNER_A, run.fence - 1)]
    )
    assert answers == {run.id: LeaseAnswer.LOST}


async def test_renew_by_another_owner_returns_lost(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    answers = renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run.id, OWNER_B, run.fence)]
    )
    assert answers == {run.id: LeaseAnswer.LOST}


async def test_late_renewal_before_any_reconciler_keeps_the_run(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.2)  # expired, nobody reconciled
    answers = renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run.id, OWNER_A, run.fence)]
    )
    assert answers == {run.id: LeaseAnswer.OK}
    assert await lease_store.reconcile("default") == []
    assert (await run_store.get(run.id)).status == RunStatus.RUNNING


async def test_a_lease_only_moves_forward(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    before = (await run_store.get(run.id)).lease_expires_at
    short = LeaseRenewer(
        sync_client(redis_url), scripts=scripts, prefix=lease_store.prefix, lease_ttl_ms=10
    )
    assert short.renew([Lease("default", run.id, OWNER_A, run.fence)]) == {run.id: LeaseAnswer.OK}
    assert (await run_store.get(run.id)).lease_expires_at == before


async def test_expired_lease_is_orphaned_with_evidence_and_old_owner_is_fenced_out(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    actions = await lease_store.reconcile("default")
    assert [(a.run_id, a.action) for a in actions] == [(run_id, "orphaned")]
    orphaned = await run_store.get(run_id)
    assert orphaned.status == RunStatus.ORPHANED
    assert orphaned.error is not None
    assert (orphaned.error.code, orphaned.error.message) == (
        "lease_expired",
        "executor lease expired",
    )
    assert orphaned.error.details["owner_id"] == OWNER_A
    assert orphaned.error.details["fence"] == run.fence
    assert orphaned.error.details["detected_at_ms"] > orphaned.error.details["lease_expires_at_ms"]
    assert orphaned.fence == run.fence + 1
    # every write of the old owner is now rejected
    assert renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run_id, OWNER_A, run.fence)]
    ) == {run_id: LeaseAnswer.LOST}
    with pytest.raises(LeaseLost):
        await lease_store.append_events(
            Lease("default", run_id, OWNER_A, run.fence), [("progress", "{}")]
        )
    codes, _ = await lease_store.finish_and_claim(
        "default", OWNER_A, [Outcome(run.lease, RunStatus.SUCCEEDED, output_json="1")], 0
    )
    assert codes == [LeaseAnswer.LOST]
    assert (await run_store.get(run_id)).status == RunStatus.ORPHANED
    assert (await event_types(run_store, run_id))[-1] == "orphaned"


async def test_reconcile_is_idempotent_across_reconcilers(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    for _ in range(5):
        await create(run_store)
    await lease_store.claim("default", OWNER_A, 5)
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    results = await asyncio.gather(*[lease_store.reconcile("default") for _ in range(4)])
    assert sum(len(actions) for actions in results) == 5


async def test_retry_policy_requeues_with_a_new_fence_until_attempts_run_out(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store, on_lease_expired="retry", max_attempts=2)
    first = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["requeued"]
    requeued = await run_store.get(run_id)
    assert requeued.status == RunStatus.QUEUED
    assert requeued.attempt == 2
    second = (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    assert second.fence > first.fence
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["orphaned"]
    types = await event_types(run_store, run_id)
    assert types == ["created", "claimed", "lease_expired", "requeued", "claimed", "orphaned"]


async def test_expiry_evidence_names_the_last_renewal_of_this_attempt(
    redis_url: str,
    scripts: Scripts,
    run_store: RunStore,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
) -> None:
    """last_renewed_at_ms: the claim's time until a renewal, then the renewal's; never
    a renewal of an earlier attempt (the claim writes no last_renewed_at of its own)."""
    run_id = await create(run_store, on_lease_expired="retry", max_attempts=2)
    first = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run_id, OWNER_A, first.fence)]
    ) == {run_id: LeaseAnswer.OK}
    run_key = lease_store.keys("default").run(run_id)
    renewed_ms = int(await redis_client.hget(run_key, "last_renewed_at") or 0)
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["requeued"]
    lost = [e for e in await run_store.read_events(run_id) if e.type == "lease_expired"]
    assert lost[0].data["last_renewed_at_ms"] == renewed_ms > 0
    (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    second_started = (await run_store.get(run_id)).started_at
    assert second_started is not None
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["orphaned"]
    orphaned = await run_store.get(run_id)
    assert orphaned.error is not None
    evidence = orphaned.error.details
    assert evidence["last_renewed_at_ms"] == round(second_started.timestamp() * 1000)
    assert evidence["last_renewed_at_ms"] > renewed_ms


async def test_a_claim_names_the_previous_claim_of_its_run(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """prior_fence/prior_owner (tracing's takeover link): none at a first claim, then the
    fence and owner of the claim before, also for a record written before attempt_claim
    (attempt_fence and attempt_owner, the two fields it replaced)."""
    run_id = await create(run_store, on_lease_expired="retry", max_attempts=3)
    first = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert (first.prior_fence, first.prior_owner) == (None, None)
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["requeued"]
    second = (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    assert (second.prior_fence, second.prior_owner) == (first.fence, OWNER_A)
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["requeued"]
    run_key = lease_store.keys("default").run(run_id)
    await redis_client.hdel(run_key, "attempt_claim")
    await redis_client.hset(run_key, mapping={"attempt_fence": 7, "attempt_owner": "w old"})
    third = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert (third.prior_fence, third.prior_owner) == (7, "w old")


async def test_failed_outcome_with_retry_is_requeued_after_its_delay(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store, max_attempts=2)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert run.id == run_id
    error = json.dumps({"code": "x", "message": "boom", "retryable": True, "details": {}})
    codes, _ = await lease_store.finish_and_claim(
        "default",
        OWNER_A,
        [Outcome(run.lease, RunStatus.FAILED, error_json=error, retry_delay_ms=300)],
        0,
    )
    assert codes == [LeaseAnswer.RETRY]
    assert (await lease_store.claim("default", OWNER_B, 1)).runs == []
    retried = await eventually(
        lambda: lease_store.claim("default", OWNER_B, 1),
        until=lambda claim: bool(claim.runs),
        what="the delayed retry",
    )
    assert retried.runs[0].attempt == 2


async def test_release_requeues_at_the_front_with_fence_plus_one(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    first_id = await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    await create(run_store)
    codes = await lease_store.release([Lease("default", run.id, OWNER_A, run.fence)], "drain")
    assert codes == [LeaseAnswer.OK]
    released = await run_store.get(first_id)
    assert released.status == RunStatus.QUEUED
    assert released.fence == run.fence + 1
    next_claim = (await lease_store.claim("default", OWNER_B, 1)).runs[0]
    assert next_claim.id == first_id


async def test_cancel_of_a_queued_run_is_immediate_and_idempotent(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    assert await run_store.cancel(run_id) == RunStatus.CANCELLED
    assert await run_store.cancel(run_id) == RunStatus.CANCELLED
    assert (await lease_store.claim("default", OWNER_A, 1)).runs == []
    assert (await event_types(run_store, run_id)) == ["created", "cancelled"]


async def test_cancel_of_a_running_run_is_delivered_by_the_renewal(
    redis_url: str, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    answers = renewer(redis_url, scripts, lease_store).renew(
        [Lease("default", run_id, OWNER_A, run.fence)]
    )
    assert answers == {run_id: LeaseAnswer.CANCEL}
    codes, _ = await lease_store.finish_and_claim(
        "default", OWNER_A, [Outcome(run.lease, RunStatus.CANCELLED)], 0
    )
    assert codes == [LeaseAnswer.OK]
    assert (await run_store.get(run_id)).status == RunStatus.CANCELLED


async def test_expired_lease_of_a_cancelling_run_ends_cancelled(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id = await create(run_store)
    await lease_store.claim("default", OWNER_A, 1)
    await run_store.cancel(run_id)
    await asyncio.sleep(lease_store.lease_ttl_ms / 1000 + 0.1)
    assert [a.action for a in await lease_store.reconcile("default")] == ["cancelled"]
    assert (await run_store.get(run_id)).status == RunStatus.CANCELLED


async def test_terminal_runs_expire_after_retention(
    redis_client: aioredis.Redis, scripts: Scripts, prefix: str
) -> None:
    ctx = StoreContext(
        redis_client,
        scripts,
        prefix,
        events_maxlen=100,
        retention=Retention.uniform(200),
        lease_ttl_ms=1000,
        queued_ttl_ms=60_000,
    )
    short, store = LeaseStore(ctx), RunStore(ctx)
    run_id = await create(store, idempotency_key="once")
    run = (await short.claim("default", OWNER_A, 1)).runs[0]
    await short.finish_and_claim("default", OWNER_A, [Outcome(run.lease, RunStatus.SUCCEEDED)], 0)
    keys = short.keys("default")
    assert await redis_client.pttl(keys.run(run_id)) > 0
    assert await redis_client.pttl(keys.events(run_id)) > 0
    assert await redis_client.pttl(keys.idem("once")) > 0
    await eventually(
        lambda: redis_client.exists(keys.run(run_id)),
        until=lambda n: n == 0,
        what="the record to expire",
    )


async def test_a_claim_repeated_with_its_token_returns_the_same_runs_and_claims_no_more(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    first, second, third = [await create(run_store) for _ in range(3)]
    claimed = await lease_store.claim("default", OWNER_A, 2, token="t-1")
    again = await lease_store.claim("default", OWNER_A, 2, token="t-1")  # the reply was lost
    assert [(run.id, run.fence) for run in again.runs] == [(first, 1), (second, 1)]
    assert again.runs == claimed.runs
    assert (await run_store.get(third)).status == RunStatus.QUEUED
    assert await event_types(run_store, first) == ["created", "claimed"]  # claimed once
    assert [run.id for run in (await lease_store.claim("default", OWNER_A, 2)).runs] == [third]


async def test_a_repeated_claim_leaves_out_what_is_no_longer_held_under_its_fence(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    released_id = await create(run_store)
    kept_id = await create(run_store)
    runs = (await lease_store.claim("default", OWNER_A, 2, token="t-1")).runs
    released = next(run for run in runs if run.id == released_id)
    await lease_store.release([Lease("default", released.id, OWNER_A, released.fence)], "drain")
    again = await lease_store.claim("default", OWNER_A, 2, token="t-1")
    assert [run.id for run in again.runs] == [kept_id]
    assert (await run_store.get(released_id)).status == RunStatus.QUEUED  # not re-claimed
    # the same token from another owner is another claim
    other = await lease_store.claim("default", OWNER_B, 2, token="t-1")
    assert [run.id for run in other.runs] == [released_id]
    assert other.runs[0].fence == released.fence + 2  # the release, then this claim


async def _cancelling_run(run_store: RunStore, lease_store: LeaseStore) -> tuple[str, int]:
    """A run held by OWNER_A whose client's cancel was answered ``cancelling``."""
    run_id = await create(run_store, max_attempts=3)
    run = (await lease_store.claim("default", OWNER_A, 1)).runs[0]
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    return run_id, run.fence


async def _settled_once_as_cancelled(
    run_store: RunStore, lease_store: LeaseStore, run_id: str
) -> dict[str, object]:
    """The run ended cancelled, with one terminal event and no lease left; its data."""
    stored = await run_store.get(run_id)
    assert stored.status == RunStatus.CANCELLED
    assert stored.owner_id == OWNER_A and stored.lease_expires_at is None
    assert stored.attempt == 1
    events = await run_store.read_events(run_id)
    assert [event.type for event in events] == [
        "created",
        "claimed",
        "cancel_requested",
        "cancelled",
    ]
    assert await lease_store.client.zscore(lease_store.keys("default").leases, run_id) is None
    assert await lease_store.client.llen(lease_store.keys("default").ready) == 0
    assert await lease_store.client.zcard(lease_store.keys("default").delayed) == 0
    return events[-1].data


async def test_a_retryable_failure_of_a_cancelling_run_ends_it_cancelled_not_queued(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id, fence = await _cancelling_run(run_store, lease_store)
    failed = Outcome(
        Lease("default", run_id, OWNER_A, fence),
        RunStatus.FAILED,
        error_json='{"code":"flaky","message":"x","retryable":true}',
        retry_delay_ms=0,
    )
    codes, _ = await lease_store.finish_and_claim("default", OWNER_A, [failed], 0)
    assert codes == [LeaseAnswer.CANCEL]
    data = await _settled_once_as_cancelled(run_store, lease_store, run_id)
    assert data["superseded"] == "failed"
    assert data["error"] == {"code": "flaky", "message": "x", "retryable": True}
    # the same write sent again after a lost reply is answered the same, written once
    again, _ = await lease_store.finish_and_claim("default", OWNER_A, [failed], 0)
    assert again == [LeaseAnswer.CANCEL]
    await _settled_once_as_cancelled(run_store, lease_store, run_id)


async def test_an_escalation_of_a_cancelling_run_ends_it_cancelled_not_parked(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    run_id, fence = await _cancelling_run(run_store, lease_store)
    escalation = json.dumps({"reason": "stuck", "evidence": {"silent_s": 9}})
    outcome = Outcome(
        Lease("default", run_id, OWNER_A, fence), RunStatus.WAITING_HUMAN, output_json=escalation
    )
    codes, _ = await lease_store.finish_and_claim("default", OWNER_A, [outcome], 0)
    assert codes == [LeaseAnswer.CANCEL]
    data = await _settled_once_as_cancelled(run_store, lease_store, run_id)
    assert data["superseded"] == "waiting_human"
    assert data["escalation"] == {"reason": "stuck", "evidence": {"silent_s": 9}}


async def test_a_cancelling_run_that_reached_success_or_a_final_failure_keeps_it(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    succeeded_id, fence = await _cancelling_run(run_store, lease_store)
    done = Outcome(
        Lease("default", succeeded_id, OWNER_A, fence),
        RunStatus.SUCCEEDED,
        output_json='{"ok":true}',
    )
    assert (await lease_store.finish_and_claim("default", OWNER_A, [done], 0))[0] == [
        LeaseAnswer.OK
    ]
    assert (await run_store.get(succeeded_id)).status == RunStatus.SUCCEEDED
    failed_id, fence = await _cancelling_run(run_store, lease_store)
    final = Outcome(
        Lease("default", failed_id, OWNER_A, fence),
        RunStatus.FAILED,
        error_json='{"code":"x","message":"x"}',
    )
    assert (await lease_store.finish_and_claim("default", OWNER_A, [final], 0))[0] == [
        LeaseAnswer.OK
    ]
    assert (await run_store.get(failed_id)).status == RunStatus.FAILED
