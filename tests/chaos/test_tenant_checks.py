"""The neighbour tenant's invariants on hand-made Redis state: each breach is named."""

from __future__ import annotations

import random

import redis.asyncio as aioredis

from app.namespaces import namespace_prefix
from app.store.keys import QueueKeys
from tools.chaos.faults import QUEUE
from tools.chaos.tenants import NEIGHBOUR, RATE_PER_S, Neighbour


async def stored(redis: aioredis.Redis, prefix: str, statuses: list[str]) -> None:
    keys = QueueKeys(namespace_prefix(prefix, NEIGHBOUR), QUEUE)
    for n, status in enumerate(statuses):
        run_id = f"{QUEUE}.01ARZ3NDEKTSV4RRFFQ69G5F{n:02d}"
        await redis.zadd(keys.runs, {run_id: n})
        await redis.hset(keys.run(run_id), "status", status)


def neighbour(elapsed_s: float) -> Neighbour:
    found = Neighbour([], random.Random(1))
    found.elapsed_s = elapsed_s
    return found


def kinds(violations: list[object]) -> list[str]:
    return sorted(getattr(v, "kind") for v in violations)  # noqa: B009


async def test_queued_runs_within_the_quota_pass(redis_client: aioredis.Redis, prefix: str) -> None:
    await stored(redis_client, prefix, ["queued"] * (RATE_PER_S * 3))
    assert await neighbour(2.0).check(redis_client, prefix, redis_restarts=0) == []


async def test_a_claimed_neighbour_run_and_too_many_runs_are_named(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    await stored(redis_client, prefix, ["running"] + ["queued"] * (RATE_PER_S * 4))
    found = await neighbour(1.0).check(redis_client, prefix, redis_restarts=0)
    assert kinds(found) == ["cross_namespace_claim", "quota_exceeded"]
    # a Redis restart may lose the bucket's last write: one more burst is allowed
    restarted = await neighbour(2.0).check(redis_client, prefix, redis_restarts=1)
    assert kinds(restarted) == ["cross_namespace_claim"]


async def test_a_read_answered_across_namespaces_is_named(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    seen = neighbour(1.0)
    seen.crossed.append("work.01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert kinds(await seen.check(redis_client, prefix, redis_restarts=0)) == [
        "cross_namespace_read"
    ]
