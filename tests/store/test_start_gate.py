"""Start gates: a run naming rate-limit keys starts only when its buckets let it (claim_runs)."""

from __future__ import annotations

import asyncio
import itertools
import json

import redis.asyncio as aioredis

from app.models.read import RateLimitSpec
from app.store.keys import QueueKeys
from app.store.leases.store import LeaseStore
from app.store.ratelimits.store import StartGate
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.store.test_ratelimits import worst_window
from tests.support.lua import snippet

QUEUE = "default"
SPEC = RateLimitSpec(limit=5, period_s=1.0, burst=2)


async def gated(store: RunStore, count: int, bucket: str = "crm:acme") -> list[str]:
    gate = StartGate(bucket, SPEC)
    ids = []
    for i in range(count):
        new = NewRun(handler="demo.echo", input={"i": i}, rate_limits=(gate,))
        ids.append((await store.create(new)).run.id)
    return ids


async def waits(client: aioredis.Redis, keys: QueueKeys, run_id: str) -> list[dict[str, object]]:
    entries = await client.xrange(keys.events(run_id))
    return [json.loads(fields["data"]) for _, fields in entries if fields["type"] == "wait"]


async def test_held_back_runs_wait_in_delayed_at_staggered_exact_times_with_a_wait_event(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = QueueKeys(prefix, QUEUE)
    ids = await gated(run_store, 6)
    plain = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    claim = await lease_store.claim(QUEUE, "w-1", 10)
    claimed = {run.id for run in claim.runs}
    assert claimed == {*ids[:2], plain}  # the burst, and the ungated run
    delayed = dict(await redis_client.zrange(keys.delayed, 0, -1, withscores=True))
    assert set(delayed) == set(ids[2:])
    times = sorted(delayed.values())
    assert [b - a for a, b in itertools.pairwise(times)] == [200.0] * 3
    assert claim.next_due_ms == int(times[0])  # the worker sleeps until the first is due
    for run_id in ids[2:]:
        (wait,) = await waits(redis_client, keys, run_id)
        assert wait["kind"] == "rate_limited" and wait["key"] == "crm:acme"
        assert wait["until_ms"] == delayed[run_id]
        assert (await run_store.get(run_id)).status == "queued"


async def test_gated_starts_never_pass_limit_plus_burst_and_each_run_waits_once(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """Two claimers polling; 14 gated runs start over ~2.4 s, <= 5 + 2 in any 1 s window."""
    keys = QueueKeys(prefix, QUEUE)
    ids = await gated(run_store, 14)
    started: dict[str, int] = {}

    async def claimer(owner: str) -> None:
        while len(started) < len(ids):
            for run in (await lease_store.claim(QUEUE, owner, 4)).runs:
                started[run.id] = int(await redis_client.hget(keys.run(run.id), "started_at"))
            await asyncio.sleep(0.02)

    await asyncio.wait_for(asyncio.gather(claimer("w-1"), claimer("w-2")), timeout=60)
    assert worst_window(list(started.values()), 1000) <= SPEC.limit + SPEC.burst
    for run_id in ids:
        # a slot holds: nobody on time is sent back to wait a second time (no spinning)
        assert len(await waits(redis_client, keys, run_id)) <= 1


async def test_start_buckets_are_per_queue_and_per_key(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    await gated(run_store, 2, "crm:a")
    await gated(run_store, 2, "crm:b")
    claim = await lease_store.claim(QUEUE, "w-1", 10)
    assert len(claim.runs) == 4  # each key has its own burst of 2


async def test_lua_derives_the_start_bucket_key_as_store_keys_builds_it(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = QueueKeys(prefix, QUEUE)
    derived = await redis_client.eval(
        snippet("return start_bucket_of(ARGV[1], ARGV[2])", "keys"), 0, keys.run_prefix, "crm:acme"
    )
    assert derived == keys.start_bucket("crm:acme")


async def test_a_late_claim_starts_no_more_than_the_burst_however_many_slots_passed(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """Slots are a schedule, not tokens: tokens are taken at the start, by the Redis clock."""
    ids = await gated(run_store, 8)
    first = await lease_store.claim(QUEUE, "w-1", 10)
    assert len(first.runs) == SPEC.burst
    await asyncio.sleep(1.5)  # every slot (200 ms apart) is due: a worker that was away
    late = await lease_store.claim(QUEUE, "w-1", 10)
    assert len(late.runs) <= SPEC.burst
    started = [
        int(await redis_client.hget(QueueKeys(prefix, QUEUE).run(run_id), "started_at"))
        for run_id in ids
        if await redis_client.hget(QueueKeys(prefix, QUEUE).run(run_id), "started_at")
    ]
    assert worst_window(started, 1000) <= SPEC.limit + SPEC.burst
    # the rest lined up again, staggered, and no run was lost
    assert await redis_client.zcard(QueueKeys(prefix, QUEUE).delayed) == 8 - len(started)


async def test_a_run_released_for_a_rate_limit_gives_its_slots_back_while_it_waits(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """hatchet#4804: a rate-limited run holding a filled slot deadlocked its group."""
    keys = QueueKeys(prefix, QUEUE)
    new = NewRun(handler="demo.echo", input={}, concurrency_key="tenant-a", max_attempts=1)
    created = await run_store.create(new)
    (run,) = (await lease_store.claim(QUEUE, "w-1", 1)).runs
    assert await redis_client.hget(keys.slots, "k:tenant-a") == "1"
    await lease_store.release([run.lease], "upstream_429", delay_ms=60_000)
    assert not await redis_client.hget(keys.slots, "k:tenant-a")  # given back at once
    assert await redis_client.zscore(keys.delayed, created.run.id) is not None
    stored = await run_store.get(created.run.id)
    assert (stored.status, stored.attempt) == ("queued", 1)  # no attempt spent
