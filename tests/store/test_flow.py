"""Concurrency limits, fair lanes, priorities and singletons in the run scripts (real Redis).

What a user observes: which runs a claim hands out, in which order, what waits and
why (the `wait` event), and that every slot comes back whichever way a run leaves.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from app.errors import SingletonConflict
from app.models import RunStatus
from app.models.read import QueueLimits
from app.settings import Settings
from app.store.flow.store import FlowStore
from app.store.leases.store import ClaimedRun, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually

Q = "default"


@pytest.fixture
def flow(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> FlowStore:
    return FlowStore(
        redis_client, scripts=scripts, prefix=settings.prefix, events_maxlen=settings.events_maxlen
    )


async def create(run_store: RunStore, handler: str = "demo.echo", **options: object) -> str:
    new = NewRun(handler=handler, input={}, **options)  # type: ignore[arg-type]
    return (await run_store.create(new)).run.id


async def claim(lease_store: LeaseStore, count: int, owner: str = "w-1") -> list[ClaimedRun]:
    return (await lease_store.claim(Q, owner, count)).runs


async def finish(
    lease_store: LeaseStore,
    run: ClaimedRun,
    status: str = "succeeded",
    owner: str = "w-1",
    **kw: object,
) -> str:
    outcome = Outcome(run.lease, RunStatus(status), **kw)  # type: ignore[arg-type]
    codes, _ = await lease_store.finish_and_claim(Q, owner, [outcome], 0)
    return codes[0]


async def create_and_claim(run_store: RunStore, lease_store: LeaseStore) -> ClaimedRun:
    run_id = await create(run_store, concurrency_key="k", max_attempts=3, on_lease_expired="retry")
    (run,) = await claim(lease_store, 1)
    assert run.id == run_id
    return run


async def slots(redis_client: aioredis.Redis, flow: FlowStore) -> dict[str, str]:
    return await redis_client.hgetall(flow.keys(Q).slots)


async def test_a_key_at_its_limit_starts_no_more_until_a_slot_comes_back(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore, redis_client: aioredis.Redis
) -> None:
    await flow.set_limits(Q, QueueLimits(default_key=1))
    first, second = [await create(run_store, concurrency_key="tenant-a") for _ in range(2)]
    other = await create(run_store, concurrency_key="tenant-b")
    claimed = await claim(lease_store, 10)
    assert sorted(run.id for run in claimed) == sorted([first, other])
    assert await claim(lease_store, 10) == []
    waiting = await run_store.get(second)
    assert waiting.status == RunStatus.QUEUED and waiting.blocked_on == "k:tenant-a"
    events = await run_store.read_events(second)
    assert [e.type for e in events] == ["created", "wait"]
    assert events[-1].data == {
        "kind": "concurrency_limit",
        "resource": "concurrency_key",
        "subject": "tenant-a",
        "limit": 1,
    }
    # claiming again does not repeat the wait event
    await claim(lease_store, 10)
    assert len(await run_store.read_events(second)) == 2
    by_id = {run.id: run for run in claimed}
    assert await finish(lease_store, by_id[first]) == "OK"
    assert [run.id for run in await claim(lease_store, 10)] == [second]
    assert (await run_store.get(second)).blocked_on is None


async def test_handler_and_queue_limits_hold_across_owners(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore
) -> None:
    await flow.set_limits(Q, QueueLimits(queue=3, handlers={"demo.echo": 2}))
    for _ in range(4):
        await create(run_store, "demo.echo")
    for _ in range(4):
        await create(run_store, "demo.slow")
    got = await asyncio.gather(*(claim(lease_store, 10, f"w-{i}") for i in range(4)))
    runs = [run for batch in got for run in batch]
    assert len(runs) == 3
    assert sum(run.handler == "demo.echo" for run in runs) <= 2


async def test_every_way_out_gives_the_slot_back(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
) -> None:
    """Finish, retry (now and after a backoff), escalation (park), release, cancel, lease
    expiry: the counters end empty."""
    await flow.set_limits(Q, QueueLimits(default_key=10))
    backoff = await create(run_store, concurrency_key="k", max_attempts=2)
    (backing_off,) = await claim(lease_store, 1)
    assert backing_off.id == backoff
    assert await finish(lease_store, backing_off, "failed", retry_delay_ms=60_000) == "RETRY"
    assert await slots(redis_client, flow) == {}
    for _ in range(6):
        await create(run_store, concurrency_key="k", max_attempts=3, on_lease_expired="retry")
    runs = await claim(lease_store, 6)
    assert len(runs) == 6
    assert (await slots(redis_client, flow))["k:k"] == "6"
    # a run released to wait for a rate-limit token (ctx.rate_limited) holds no slot
    held = runs.pop()
    assert await lease_store.release([held.lease], "rate_limited", delay_ms=60_000) == ["OK"]
    assert (await slots(redis_client, flow))["k:k"] == "5"
    runs.append(await create_and_claim(run_store, lease_store))
    ok, retried, parked, released, cancelled, expired = runs
    assert await finish(lease_store, ok) == "OK"
    assert await finish(lease_store, retried, "failed", retry_delay_ms=0) == "RETRY"
    assert await finish(lease_store, parked, "waiting_human", output_json='{"reason": "x"}') == "OK"
    assert await lease_store.release([released.lease], "drain") == ["OK"]
    await run_store.cancel(cancelled.id)
    assert await finish(lease_store, cancelled, "cancelled") == "OK"
    # the expired one: its lease runs out, the reconciler requeues it
    await redis_client.zadd(lease_store.keys(Q).leases, {expired.id: 1})
    await redis_client.hset(lease_store.keys(Q).run(expired.id), "lease_expires_at", 1)
    actions = await lease_store.reconcile(Q)
    assert [a.action for a in actions] == ["requeued"]
    assert await slots(redis_client, flow) == {}
    # a finish resent after the reconciler acted gives nothing back twice
    assert await finish(lease_store, expired) == "LOST"
    assert await slots(redis_client, flow) == {}
    # the three requeued ones start again, each taking its slot once more
    again = await claim(lease_store, 10)
    assert sorted(r.id for r in again) == sorted([retried.id, released.id, expired.id])
    assert (await slots(redis_client, flow))["k:k"] == "3"


async def test_one_tenant_with_a_backlog_does_not_delay_another(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    """Tenant A queues 2,000 runs, then B queues 10: B's first starts in the next claim round."""
    a_ids = await run_store.create_many(
        [NewRun(handler="demo.echo", input={}, concurrency_key="a") for _ in range(2000)]
    )
    assert all(not isinstance(c, Exception) for c in a_ids)
    b_ids = [await create(run_store, concurrency_key="b") for _ in range(10)]
    order = []
    for _ in range(20):
        order += [run.id for run in await claim(lease_store, 1)]
    keys = ["b" if run_id in b_ids else "a" for run_id in order]
    assert keys.index("b") <= 1
    assert keys == ["a", "b"] * 10 or keys == ["b", "a"] * 10


async def test_priorities_order_a_lane_and_age(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    low = await create(run_store, priority=0, boost_ms=0)
    high = await create(run_store, priority=5, boost_ms=5 * 60_000)
    mid = await create(run_store, priority=1, boost_ms=60_000)
    assert [r.id for r in await claim(lease_store, 1)] == [high]
    assert [r.id for r in await claim(lease_store, 1)] == [mid]
    assert [r.id for r in await claim(lease_store, 1)] == [low]


async def test_an_old_low_priority_run_passes_newer_high_ones_after_the_aging_bound(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    """Priority 2 over 0 with a 200 ms step: only runs enqueued < 400 ms after it pass it."""
    bound_ms = 2 * 200
    low = await create(run_store, priority=0, boost_ms=0)
    high = [await create(run_store, priority=2, boost_ms=bound_ms) for _ in range(3)]
    await asyncio.sleep(bound_ms / 1000 + 0.1)
    high += [await create(run_store, priority=2, boost_ms=bound_ms) for _ in range(3)]
    order = [r.id for r in await claim(lease_store, 7)]
    low_created = (await run_store.get(low)).created_at
    for run_id in high:
        waited_ms = ((await run_store.get(run_id)).created_at - low_created).total_seconds() * 1000
        passed = order.index(run_id) < order.index(low)
        assert passed == (waited_ms < bound_ms), (run_id, waited_ms)
    assert order[-1] != low  # the stream of higher ones did not keep it waiting


async def test_changing_a_queued_runs_priority_moves_it(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore
) -> None:
    first = await create(run_store)
    second = await create(run_store)
    await flow.set_priority(second, 10, 10_000)
    assert (await run_store.get(second)).priority == 10
    assert [r.id for r in await claim(lease_store, 2)] == [second, first]
    from app.errors import InvalidTransition

    with pytest.raises(InvalidTransition):
        await flow.set_priority(second, 1, 1000)


async def test_singleton_reject_names_the_live_run(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    first = await create(run_store, singleton_key="thread-1", on_conflict="reject")
    with pytest.raises(SingletonConflict) as refused:
        await create(run_store, singleton_key="thread-1", on_conflict="reject")
    assert refused.value.run_id == first
    (running,) = await claim(lease_store, 5)
    with pytest.raises(SingletonConflict):
        await create(run_store, singleton_key="thread-1", on_conflict="reject")
    await finish(lease_store, running)
    await create(run_store, singleton_key="thread-1", on_conflict="reject")


async def test_singleton_enqueue_runs_one_after_the_other(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = [
        await create(run_store, singleton_key="t", handler=h)
        for h in ("demo.echo", "demo.slow", "demo.echo")
    ]
    for expected in ids:
        runs = await claim(lease_store, 5)
        assert [r.id for r in runs] == [expected]
        assert await claim(lease_store, 5) == []
        await finish(lease_store, runs[0])


async def test_singleton_replace_queued_supersedes_the_waiting_run(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    active = await create(run_store, singleton_key="t")
    (running,) = await claim(lease_store, 5)
    queued = await create(run_store, singleton_key="t", on_conflict="replace_queued")
    newest = await create(run_store, singleton_key="t", on_conflict="replace_queued")
    gone = await run_store.get(queued)
    assert gone.status == RunStatus.CANCELLED and gone.error and gone.error.code == "superseded"
    assert (await run_store.read_events(queued))[-1].data["reason"] == "superseded"
    assert (await run_store.get(active)).status == RunStatus.RUNNING
    await finish(lease_store, running)
    assert [r.id for r in await claim(lease_store, 5)] == [newest]


async def test_singleton_cancel_active_cancels_then_starts(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    active = await create(run_store, singleton_key="t")
    (running,) = await claim(lease_store, 5)
    newer = await create(run_store, singleton_key="t", on_conflict="cancel_active")
    assert (await run_store.get(active)).status == RunStatus.CANCELLING
    assert await claim(lease_store, 5) == []  # not before the old one's slot returns
    assert await finish(lease_store, running, "cancelled") == "OK"
    assert [r.id for r in await claim(lease_store, 5)] == [newer]


async def test_recount_repairs_a_drifted_counter_and_says_so(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
) -> None:
    await flow.set_limits(Q, QueueLimits(default_key=1))
    await create(run_store, concurrency_key="k")
    waiting = await create(run_store, concurrency_key="k")
    (running,) = await claim(lease_store, 5)
    assert await claim(lease_store, 5) == []
    await finish(lease_store, running)
    # a counter that drifted (a bug, an old snapshot restored) would block the key for ever
    await redis_client.hset(flow.keys(Q).slots, "k:k", 1)
    await redis_client.sadd(flow.keys(Q).wait("k:k"), "demo.echo|k")
    await redis_client.sadd(flow.keys(Q).blocked, "k:k")
    await redis_client.hset(flow.keys(Q).placed, "demo.echo|k", "k:k")
    await redis_client.lrem(flow.keys(Q).ready, 0, "demo.echo|k")
    assert await claim(lease_store, 5) == []
    fixes, woken = await flow.recount(Q)
    assert [(f.field, f.counted, f.held) for f in fixes] == [("k:k", "1", "")]
    assert woken == 1
    assert [r.id for r in await claim(lease_store, 5)] == [waiting]


async def test_a_durable_sleep_gives_its_slot_back_and_retakes_it_when_it_wakes(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
    scripts: Scripts,
    settings: Settings,
) -> None:
    from app.store.waits.store import WaitCall, WaitKind, WaitStore

    await flow.set_limits(Q, QueueLimits(default_key=1))
    sleeper = await create(run_store, concurrency_key="k")
    other = await create(run_store, concurrency_key="k")
    (running,) = await claim(lease_store, 5)
    assert running.id == sleeper
    waits = WaitStore.for_settings(redis_client, scripts, settings)
    call = WaitCall(sleeper, WaitKind.SLEEP, "nap", 1, duration_ms=300)
    await waits.park(running.lease, call)
    assert (await run_store.get(sleeper)).status == RunStatus.WAITING
    # the sleeper's slot came back: the other run of the key starts while it sleeps
    (started,) = await claim(lease_store, 5)
    assert started.id == other
    await finish(lease_store, started)
    woke = await eventually(
        lambda: claim(lease_store, 5), until=lambda runs: runs != [], what="the sleeper to wake"
    )
    assert [r.id for r in woke] == [sleeper]
    assert (await slots(redis_client, flow))["k:k"] == "1"
