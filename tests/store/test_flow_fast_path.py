"""Flow control's fast path on a real Redis: a run nothing limits takes no slot.

A run with no concurrency key, no singleton key and no start bucket, in a queue whose
handler has no limit, is claimed and ended without the slot bookkeeping (no `held`
field, no counter). What a user observes must not change: a limit declared while such
runs are running counts them at once (claims stop at it, every slot comes back), a
queue-wide limit still wakes idle workers when a lease ends, and the queue's counts,
lanes and unclaimed index say what they said before.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.models.read import QueueLimits
from app.settings import Settings
from app.store.flow.store import FlowStore
from app.store.leases.store import ClaimedRun, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.progress.store import ProgressStore
from app.store.queues.store import QueueStore
from app.store.runs.new import NewRun
from app.store.runs.reruns import Rerun, retry_run
from app.store.runs.store import RunStore

Q = "default"
OWNER = "w-1"


@pytest.fixture
def flow(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> FlowStore:
    return FlowStore(
        redis_client, scripts=scripts, prefix=settings.prefix, events_maxlen=settings.events_maxlen
    )


@pytest.fixture
def queue_store(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> QueueStore:
    return QueueStore(
        redis_client, scripts=scripts, prefix=settings.prefix, configured=[Q], max_queues=10
    )


async def create(run_store: RunStore, handler: str = "demo.echo", **options: object) -> str:
    new = NewRun(handler=handler, input={}, **options)  # type: ignore[arg-type]
    return (await run_store.create(new)).run.id


async def claim(lease_store: LeaseStore, count: int) -> list[ClaimedRun]:
    return (await lease_store.claim(Q, OWNER, count)).runs


async def finish(
    lease_store: LeaseStore, *runs: ClaimedRun, status: str = "succeeded"
) -> list[str]:
    outcomes = [Outcome(run.lease, RunStatus(status)) for run in runs]
    codes, _ = await lease_store.finish_and_claim(Q, OWNER, outcomes, 0)
    return codes


async def slots(redis_client: aioredis.Redis, flow: FlowStore) -> dict[str, str]:
    return await redis_client.hgetall(flow.keys(Q).slots)


async def held(redis_client: aioredis.Redis, flow: FlowStore, run_id: str) -> str | None:
    return await redis_client.hget(flow.keys(Q).run(run_id), "held")


async def test_a_run_nothing_limits_takes_no_slot_and_leaves_no_trace(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
    queue_store: QueueStore,
) -> None:
    ids = [await create(run_store) for _ in range(4)]
    assert (await queue_store.depth(Q)).ready == 4
    runs = await claim(lease_store, 10)
    assert sorted(run.id for run in runs) == sorted(ids)
    assert (await queue_store.depth(Q)).ready == 0
    assert [await held(redis_client, flow, run.id) for run in runs] == [None] * 4
    assert await slots(redis_client, flow) == {}
    keys = flow.keys(Q)
    assert await redis_client.zcard(keys.unclaimed) == 0
    ok, cancelled, orphan, last = runs
    assert await finish(lease_store, ok, last) == ["OK", "OK"]
    await run_store.cancel(cancelled.id)
    assert await finish(lease_store, cancelled, status="cancelled") == ["OK"]
    await redis_client.zadd(keys.leases, {orphan.id: 1})
    await redis_client.hset(keys.run(orphan.id), "lease_expires_at", 1)
    assert [a.action for a in await lease_store.reconcile(Q)] == ["orphaned"]
    statuses = [(await run_store.get(run.id)).status for run in runs]
    ended = [RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.ORPHANED, RunStatus.SUCCEEDED]
    assert statuses == ended
    assert await slots(redis_client, flow) == {}
    assert await redis_client.zcard(keys.leases) == 0
    assert await redis_client.llen(keys.ready) == 0
    assert await redis_client.hgetall(keys.placed) == {}
    assert await flow.recount(Q) == ([], 0)


async def test_a_handler_limit_declared_while_its_runs_run_counts_them(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore, redis_client: aioredis.Redis
) -> None:
    """Three run with no limit; a limit of 2 declared then: the counter says 3 at once,
    no claim passes it, and each slot comes back as its run ends."""
    for _ in range(3):
        await create(run_store)
    other = await create(run_store, "demo.slow")
    running = await claim(lease_store, 10)
    assert len(running) == 4 and await slots(redis_client, flow) == {}
    await flow.set_limits(Q, QueueLimits(handlers={"demo.echo": 2}))
    assert await slots(redis_client, flow) == {"h:demo.echo": "3"}
    echoes = [run for run in running if run.id != other]
    assert [await held(redis_client, flow, run.id) for run in echoes] == ["h:demo.echo"] * 3
    assert await held(redis_client, flow, other) is None
    # declaring the same limit again adopts nobody twice
    await flow.set_limits(Q, QueueLimits(handlers={"demo.echo": 2}))
    assert await slots(redis_client, flow) == {"h:demo.echo": "3"}
    waiting = await create(run_store)
    assert await claim(lease_store, 10) == []
    assert (await run_store.get(waiting)).blocked_on == "h:demo.echo"
    assert await finish(lease_store, echoes[0]) == ["OK"]
    assert await claim(lease_store, 10) == []  # 2 running: still at the limit
    assert await finish(lease_store, echoes[1]) == ["OK"]
    (started,) = await claim(lease_store, 10)
    assert started.id == waiting
    assert await slots(redis_client, flow) == {"h:demo.echo": "2"}
    assert await flow.recount(Q) == ([], 0)
    assert await finish(lease_store, echoes[2], started) == ["OK", "OK"]
    assert await slots(redis_client, flow) == {}


async def test_a_limit_removed_and_declared_again_counts_each_run_once(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore, redis_client: aioredis.Redis
) -> None:
    await flow.set_limits(Q, QueueLimits(handlers={"demo.echo": 5}))
    await create(run_store)
    (limited,) = await claim(lease_store, 1)
    await flow.set_limits(Q, QueueLimits())
    await create(run_store)
    (free,) = await claim(lease_store, 1)
    assert await held(redis_client, flow, free.id) is None
    await flow.set_limits(Q, QueueLimits(handlers={"demo.echo": 5}))
    assert await slots(redis_client, flow) == {"h:demo.echo": "2"}
    assert await held(redis_client, flow, limited.id) == "h:demo.echo"
    assert await held(redis_client, flow, free.id) == "h:demo.echo"
    assert await flow.recount(Q) == ([], 0)
    assert await finish(lease_store, limited, free) == ["OK", "OK"]
    assert await slots(redis_client, flow) == {}


async def test_a_limit_adopts_a_cancelling_run_and_its_keyed_slot_stays_single(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore, redis_client: aioredis.Redis
) -> None:
    """A keyed run holds its key's slot; a handler limit declared later adds the handler's
    beside it, for a run being cancelled too (it holds its lease until its owner stops)."""
    keyed = await create(run_store, concurrency_key="tenant")
    (run,) = await claim(lease_store, 1)
    assert await held(redis_client, flow, keyed) == "k:tenant"
    await run_store.cancel(keyed)
    await flow.set_limits(Q, QueueLimits(handlers={"demo.echo": 1}))
    assert await held(redis_client, flow, keyed) == "k:tenant\nh:demo.echo"
    assert await slots(redis_client, flow) == {"k:tenant": "1", "h:demo.echo": "1"}
    assert await finish(lease_store, run, status="cancelled") == ["OK"]
    assert await slots(redis_client, flow) == {}


async def test_a_queue_wide_limit_still_wakes_idle_workers_when_a_run_ends(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
) -> None:
    """The queue-wide limit counts leases, so its runs hold nothing: the end of one must
    still tell idle workers to claim again, once per finishing batch."""
    await flow.set_limits(Q, QueueLimits(queue=2))
    for _ in range(3):
        await create(run_store)
    first, second = await claim(lease_store, 10)
    assert await held(redis_client, flow, first.id) is None
    assert await claim(lease_store, 10) == []
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(flow.keys(Q).wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"  # type: ignore[index]
        assert await finish(lease_store, first, second) == ["OK", "OK"]
        wake = await pubsub.get_message(timeout=5)
        assert wake is not None and wake["data"] == "ready"
        assert await pubsub.get_message(timeout=0.2) is None  # one wake for the batch
    finally:
        await pubsub.aclose()
    assert len(await claim(lease_store, 10)) == 1


async def test_a_run_ending_with_nothing_waiting_wakes_nobody(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore, redis_client: aioredis.Redis
) -> None:
    await create(run_store)
    (run,) = await claim(lease_store, 1)
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(flow.keys(Q).wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"  # type: ignore[index]
        assert await finish(lease_store, run) == ["OK"]
        assert await pubsub.get_message(timeout=0.2) is None
    finally:
        await pubsub.aclose()


async def test_a_reruns_first_claim_takes_it_out_of_the_unclaimed_index(
    run_store: RunStore,
    lease_store: LeaseStore,
    flow: FlowStore,
    redis_client: aioredis.Redis,
    progress: ProgressStore,
) -> None:
    """A re-run's fence goes on from its old run's, so its first claim is not fence 1: the
    claim still drops it from the unclaimed index, and its end need not look there."""
    await create(run_store)
    (old,) = await claim(lease_store, 1)
    assert await finish(lease_store, old, status="failed") == ["OK"]
    rerun = (await retry_run(run_store, Rerun(old.id))).run
    unclaimed = flow.keys(Q).unclaimed
    assert await redis_client.zscore(unclaimed, rerun.id) is not None
    (claimed,) = await claim(lease_store, 1)
    assert claimed.id == rerun.id and claimed.fence > 1
    assert await redis_client.zscore(unclaimed, rerun.id) is None
    assert await finish(lease_store, claimed) == ["OK"]
    assert await redis_client.zcard(unclaimed) == 0


async def test_many_runs_claimed_in_one_call_count_down_the_queued_runs_once_each(
    run_store: RunStore, lease_store: LeaseStore, queue_store: QueueStore
) -> None:
    """The claim counts the runs it took out of lanes once per call: whatever the mix of
    lanes, keys and runs dropped on the way, the queue's ready count stays exact."""
    created = await run_store.create_many(
        [NewRun(handler="demo.echo", input={}) for _ in range(30)]
        + [NewRun(handler="demo.slow", input={}, concurrency_key=f"k{i % 3}") for i in range(9)]
    )
    assert not any(isinstance(c, Exception) for c in created)
    gone = created[0]
    assert not isinstance(gone, Exception)
    await run_store.cancel(gone.run.id)
    assert (await queue_store.depth(Q)).ready == 38
    got = await asyncio.gather(*(lease_store.claim(Q, f"w-{i}", 7) for i in range(3)))
    taken = sum(len(batch.runs) for batch in got)
    assert taken == 21
    assert (await queue_store.depth(Q)).ready == 38 - taken
    rest = await claim(lease_store, 100)
    assert len(rest) == 38 - taken
    assert (await queue_store.depth(Q)).ready == 0
