"""GET /queues counts runs parked on a durable wait apart from retry backoff.

A sleep, a signal's timeout and a join's timeout wake through the ``delayed`` set, as a
retry's backoff and a delayed start do; the ``waiting`` index the scripts keep (one
ZADD when a run parks, one ZREM when its wait ends or the run does) tells them apart
without reading a run: ``waiting`` is its ZCARD, ``delayed`` the rest of the delayed set.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.leases.store import ClaimedRun, LeaseStore
from app.store.lua.scripts import Scripts
from app.store.queues.store import QueueStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import WaitCall, WaitKind, WaitOutcome, WaitStore
from tests.support.polling import eventually

QUEUE = "default"
OWNER = "w-counts"
MINUTE_MS = 60_000


@pytest.fixture
def waits(redis_client: aioredis.Redis, settings: Settings) -> WaitStore:
    return WaitStore.for_settings(redis_client, Scripts(), settings)


@pytest.fixture
def queues(redis_client: aioredis.Redis, settings: Settings) -> QueueStore:
    return QueueStore.for_settings(redis_client, Scripts(), settings)


async def parked(
    run_store: RunStore,
    lease_store: LeaseStore,
    waits: WaitStore,
    kind: WaitKind,
    name: str,
    duration_ms: int | None = None,
    question_json: str = "",
) -> ClaimedRun:
    await run_store.create(NewRun(handler="demo.echo", input={}))
    (run,) = (await lease_store.claim(QUEUE, OWNER, 1)).runs
    call = WaitCall(run.id, kind, name, 1, duration_ms=duration_ms, question_json=question_json)
    assert (await waits.park(run.lease, call)).outcome == WaitOutcome.PARKED
    return run


async def test_durable_waits_are_counted_as_waiting_not_as_delayed(
    run_store: RunStore,
    lease_store: LeaseStore,
    waits: WaitStore,
    queues: QueueStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    nap = await parked(run_store, lease_store, waits, WaitKind.SLEEP, "nap", MINUTE_MS)
    forever = await parked(run_store, lease_store, waits, WaitKind.SIGNAL, "go")
    timed = await parked(run_store, lease_store, waits, WaitKind.SIGNAL, "go", MINUTE_MS)
    await parked(run_store, lease_store, waits, WaitKind.HUMAN, "ask", question_json='"ok?"')
    await run_store.create(NewRun(handler="demo.echo", input={}, delay_ms=MINUTE_MS))
    keys = QueueKeys(settings.prefix, QUEUE)
    assert await redis_client.zcard(keys.delayed) == 3  # the sleep, the timeout, the start

    info = await queues.info(QUEUE)
    assert (info.waiting, info.delayed, info.parked, info.ready, info.running) == (3, 1, 1, 0, 0)

    # a signal ends its wait: the run is queued again, no longer waiting
    assert (await waits.signal(forever.id, "go", "1", max_pending=4))[1] is False
    assert (await waits.signal(timed.id, "go", "2", max_pending=4))[1] is False
    info = await queues.info(QUEUE)
    assert info.waiting == 1
    # a run that ends while it waits leaves the index with it
    await run_store.cancel(nap.id)
    assert (await queues.info(QUEUE)).waiting == 0
    assert await redis_client.zcard(keys.waiting) == 0


async def test_a_sleep_whose_time_came_leaves_waiting_when_a_claim_takes_it(
    run_store: RunStore,
    lease_store: LeaseStore,
    waits: WaitStore,
    queues: QueueStore,
) -> None:
    nap = await parked(run_store, lease_store, waits, WaitKind.SLEEP, "nap", 200)
    assert (await queues.depth(QUEUE)).waiting == 1
    claim = await eventually(
        lambda: lease_store.claim(QUEUE, OWNER, 1),
        until=lambda claim: bool(claim.runs),
        what="a claim that takes the woken run",
    )
    assert claim.runs[0].id == nap.id
    depth = await queues.depth(QUEUE)
    assert (depth.waiting, depth.delayed, depth.leased) == (0, 0, 1)
