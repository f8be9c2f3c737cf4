"""The hand-off in the scripts: a create claims a run for a registered idle worker
(includes/claim.lua), against a real redis-server."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.models.read import QueueLimits, RateLimitSpec
from app.settings import Settings
from app.store.flow.store import FlowStore
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.ratelimits.store import StartGate
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

Q = "default"
OWNER = "w-idle"
LONG_MS = 60_000


@pytest.fixture
def flow(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> FlowStore:
    return FlowStore(
        redis_client, scripts=scripts, prefix=settings.prefix, events_maxlen=settings.events_maxlen
    )


async def create(run_store: RunStore, **options: object) -> str:
    new = NewRun(handler="demo.echo", input={"n": 1}, **options)  # type: ignore[arg-type]
    return (await run_store.create(new)).run.id


async def register(lease_store: LeaseStore, owner: str = OWNER, ms: int = LONG_MS) -> None:
    claim = await lease_store.claim(Q, owner, 1, handoff_ms=ms)
    assert claim.runs == [] and claim.registered


async def inbox(
    lease_store: LeaseStore, redis_client: aioredis.Redis, owner: str = OWNER
) -> list[str]:
    rows: list[str] = await redis_client.lrange(lease_store.keys(Q).handoff_inbox(owner), 0, -1)
    return [lease_store.handed_off(Q, owner, row).id for row in rows]


async def not_handed_off(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, **options: object
) -> str:
    """Create a run and see it queued, with nothing in the inbox."""
    run_id = await create(run_store, **options)
    assert (await run_store.get(run_id)).status == RunStatus.QUEUED
    assert await inbox(lease_store, redis_client) == []
    return run_id


async def test_a_create_claims_for_a_registered_worker_and_pushes_its_row(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    run_id = await create(run_store)
    run = await run_store.get(run_id)
    assert run.status == RunStatus.RUNNING and run.owner_id == OWNER and run.fence == 1
    assert [e.type for e in await run_store.read_events(run_id)] == ["created", "claimed"]
    assert await inbox(lease_store, redis_client) == [run_id]
    # the lease is the one renew and finish check: fenced like any claim
    (row,) = await redis_client.lrange(lease_store.keys(Q).handoff_inbox(OWNER), 0, -1)
    handed = lease_store.handed_off(Q, OWNER, row)
    assert handed.fence == 1 and handed.handler == "demo.echo" and handed.input == {"n": 1}
    codes, _ = await lease_store.finish_and_claim(
        Q, OWNER, [Outcome(handed.lease, RunStatus.SUCCEEDED, output_json="1")], 0
    )
    assert codes == [LeaseAnswer.OK]
    assert (await run_store.get(run_id)).status == RunStatus.SUCCEEDED


async def test_one_registration_is_one_hand_off(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    first, second = await create(run_store), await create(run_store)
    assert await inbox(lease_store, redis_client) == [first]
    assert (await run_store.get(second)).status == RunStatus.QUEUED
    # the worker's next claim finds its registration gone (a hand-off consumed it)
    claim = await lease_store.claim(Q, OWNER, 5, handoff_ms=LONG_MS)
    assert not claim.unregistered
    assert [run.id for run in claim.runs] == [second]
    assert claim.registered  # short (1 of 5): registered again


async def test_an_unused_registration_is_found_by_the_next_claim(
    lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    claim = await lease_store.claim(Q, OWNER, 0, handoff_ms=LONG_MS)
    assert claim.unregistered and not claim.registered
    assert await redis_client.zcard(lease_store.keys(Q).handoff_idle) == 0
    assert await redis_client.hlen(lease_store.keys(Q).handoff_args) == 0


async def test_no_hand_off_to_an_expired_registration(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store, ms=1)
    await asyncio.sleep(0.01)  # the registration's 1 ms are over (a time, not an outcome)
    run_id = await create(run_store)
    assert (await run_store.get(run_id)).status == RunStatus.QUEUED
    assert await inbox(lease_store, redis_client) == []


async def test_registrations_of_gone_workers_do_not_pile_up(
    lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """Killed workers never remove their own: a living worker's claims clear them."""
    keys = lease_store.keys(Q)
    for n in range(12):
        await register(lease_store, owner=f"w-gone-{n}", ms=1)
    await asyncio.sleep(0.01)  # their 1 ms are over (a time, not an outcome)
    await register(lease_store)  # a living worker's short claim: prunes 8
    await lease_store.claim(Q, OWNER, 1, handoff_ms=LONG_MS)  # its renewal: the other 4
    assert await redis_client.zrange(keys.handoff_idle, 0, -1) == [OWNER]
    assert await redis_client.hkeys(keys.handoff_args) == [OWNER]


async def test_a_claim_without_handoff_leaves_the_registration_alone(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    assert not (await lease_store.claim(Q, OWNER, 3)).unregistered
    run_id = await create(run_store)
    assert await inbox(lease_store, redis_client) == [run_id]


@pytest.mark.parametrize(
    ("limits", "options"),
    [(QueueLimits(default_key=1), {"concurrency_key": "k"}), (QueueLimits(queue=1), {})],
    ids=["concurrency_key", "queue"],
)
async def test_a_run_at_its_limit_is_not_handed_off(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
    limits: QueueLimits,
    options: dict[str, object],
) -> None:
    await flow.set_limits(Q, limits)
    held = await create(run_store, **options)
    assert [r.id for r in (await lease_store.claim(Q, "w-busy", 1)).runs] == [held]
    await register(lease_store)
    await not_handed_off(run_store, lease_store, redis_client, **options)
    if options:  # nothing was claimable: the registration stays for the next run that is
        free = await create(run_store)
        assert await inbox(lease_store, redis_client) == [free]


async def test_a_rate_limited_run_is_not_handed_off_before_its_token(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    limit = (StartGate("api", RateLimitSpec(limit=1, period_s=3600.0)),)
    first = await create(run_store, rate_limits=limit)
    assert [r.id for r in (await lease_store.claim(Q, "w-busy", 1)).runs] == [first]
    await register(lease_store)
    second = await not_handed_off(run_store, lease_store, redis_client, rate_limits=limit)
    # held back into `delayed` for its token's time, exactly as claim_runs holds it
    assert await redis_client.zscore(lease_store.keys(Q).delayed, second) is not None


async def test_a_batch_hands_off_what_claim_runs_would_pick(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    created = await run_store.create_many(
        [
            NewRun(handler="demo.echo", input={}, priority=0),
            NewRun(handler="demo.echo", input={}, priority=10, boost_ms=10_000),
            NewRun(handler="demo.echo", input={}, priority=0),
        ]
    )
    ids = [c.run.id for c in created if not isinstance(c, Exception)]
    assert await inbox(lease_store, redis_client) == [ids[1]]  # the higher priority first
    statuses = [(await run_store.get(i)).status for i in ids]
    assert statuses == [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.QUEUED]


async def test_a_batch_hands_one_run_to_each_registered_worker(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store, "w-1")
    await register(lease_store, "w-2")
    created = await run_store.create_many([NewRun(handler="demo.echo", input={})] * 3)
    ids = [c.run.id for c in created if not isinstance(c, Exception)]
    handed = await inbox(lease_store, redis_client, "w-1") + await inbox(
        lease_store, redis_client, "w-2"
    )
    assert sorted(handed) == sorted(ids[:2])
    assert (await run_store.get(ids[2])).status == RunStatus.QUEUED


async def reconciled(lease_store: LeaseStore) -> list[tuple[str, str]]:
    """Reconcile until the hand-off's lease has expired and something was done (poll)."""
    deadline = asyncio.get_running_loop().time() + lease_store.lease_ttl_ms / 1000 + 10
    while asyncio.get_running_loop().time() < deadline:
        actions = await lease_store.reconcile(Q)
        if actions:
            return [(a.run_id, a.action) for a in actions]
        await asyncio.sleep(0.05)
    raise AssertionError("no expired lease was found")


async def test_a_hand_off_never_taken_goes_back_to_its_queue_when_its_lease_expires(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """The worker died registered: nothing ever ran the run, so it is not orphaned."""
    await register(lease_store)
    run_id = await create(run_store)
    assert await inbox(lease_store, redis_client) == [run_id]
    assert await reconciled(lease_store) == [(run_id, "released")]
    run = await run_store.get(run_id)
    assert run.status == RunStatus.QUEUED and run.owner_id is None
    assert run.attempt == 1 and run.fence == 2  # no attempt counted; the dead owner fenced out
    events = await run_store.read_events(run_id)
    assert [e.type for e in events] == ["created", "claimed", "released"]
    assert events[-1].data == {"owner_id": OWNER, "reason": "handoff_undelivered"}
    assert await inbox(lease_store, redis_client) == []
    # a living worker claims it as any queued run, at attempt 1
    (again,) = (await lease_store.claim(Q, "w-alive", 1)).runs
    assert again.id == run_id and again.attempt == 1 and again.fence == 3
    assert await lease_store.reconcile(Q) == []


async def test_a_hand_off_cancelled_before_it_was_taken_ends_cancelled(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    await register(lease_store)
    run_id = await create(run_store)
    await run_store.cancel(run_id)
    assert (await run_store.get(run_id)).status == RunStatus.CANCELLING
    assert await reconciled(lease_store) == [(run_id, "cancelled")]
    assert (await run_store.get(run_id)).status == RunStatus.CANCELLED
    assert await inbox(lease_store, redis_client) == []


async def test_a_hand_off_the_worker_took_keeps_the_lease_expiry_policy(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """Moved to `taken`, the row reached its worker: it may have run, so today's orphan."""
    await register(lease_store)
    run_id = await create(run_store)
    keys = lease_store.keys(Q)
    assert await redis_client.lmove(
        keys.handoff_inbox(OWNER), keys.handoff_taken(OWNER), "LEFT", "RIGHT"
    )
    assert await reconciled(lease_store) == [(run_id, "orphaned")]
    run = await run_store.get(run_id)
    assert run.status == RunStatus.ORPHANED and run.error is not None
    assert run.error.code == "lease_expired"
