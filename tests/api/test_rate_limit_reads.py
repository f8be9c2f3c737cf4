"""GET /rate-limits reads every declared key's bucket in one round trip, not one per key.

Issue 35: the listing sent one ``take_tokens`` call (cost 0: a read) per declared key,
each waiting for the one before, so a deployment at LEASEHOLD_MAX_RATE_LIMITS (1000)
answered one GET with 1,001 round trips to Redis. Here, against the session's real
redis-server: the answer is what each key's own GET answers, and what one request
costs Redis, read from ``INFO stats`` / ``INFO commandstats``: the reads Redis
processed for it (a round trip is at least one) and the scripts it ran.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
import redis.asyncio as aioredis

from app.models.read import RateLimitSpec
from app.store.lua.scripts import Scripts
from app.store.ratelimits.store import Declared, RateLimitStore

KEYS = 40
SLOW = {"limit": 1, "period_s": 3600, "burst": 4}  # a drained token comes back in an hour


async def cost(client: aioredis.Redis) -> tuple[int, int]:
    """(read events Redis processed, scripts it ran) so far."""
    stats, commands = await client.info("stats"), await client.info("commandstats")
    return int(stats["total_reads_processed"]), int(commands["cmdstat_evalsha"]["calls"])


async def declare(api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str) -> None:
    """KEYS keys (every third drained by 1..4 tokens) and two templates."""
    store = RateLimitStore(redis_client, scripts=Scripts(), prefix=prefix, max_keys=1000)
    for i in range(KEYS):
        spec = {**SLOW, "burst": 1 + i % 4}
        assert (await api.put(f"/rate-limits/svc-{i:02}", json=spec)).status_code == 201
        if i % 3 == 0:
            declared = Declared(f"svc-{i:02}", f"svc-{i:02}", RateLimitSpec(**spec))
            await store.take(declared, cost=1 + i % 4, max_wait_ms=0)
    for name in ("crm:{tenant}", "mail:{domain}"):
        assert (await api.put(f"/rate-limits/{quote(name)}", json=SLOW)).status_code == 201


def at(item: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(item["state"]["next_token_at"])


async def test_the_listing_answers_what_each_key_answers(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await declare(api, redis_client, prefix)

    page = (await api.get("/rate-limits")).json()
    one_by_one = [
        (await api.get(f"/rate-limits/{quote(item['key'])}")).json() for item in page["items"]
    ]

    assert [item["key"] for item in page["items"]] == sorted(
        [f"svc-{i:02}" for i in range(KEYS)] + ["crm:{tenant}", "mail:{domain}"]
    )
    for item, alone in zip(page["items"], one_by_one, strict=True):
        assert {**item, "state": None} == {**alone, "state": None, "start_state": None}
        if item["template"]:
            assert item["state"] is None
            continue
        assert item["state"]["available"] == alone["state"]["available"]
        assert item["state"]["bucket"] == item["key"]
        if item["state"]["available"] == 0:  # drained: its next token is a fixed time
            assert at(item) == at(alone)
        else:  # a token is there now: "now", by the Redis clock, a moment apart
            assert abs((at(alone) - at(item)).total_seconds()) < 5
    drained = [item for item in page["items"] if not item["template"] and item["key"] < "svc-99"]
    assert [item["state"]["available"] for item in drained][:4] == [0, 2, 3, 0]


async def test_one_listing_reads_every_bucket_in_one_round_trip(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await declare(api, redis_client, prefix)
    await api.get("/rate-limits")  # scripts loaded, connections open

    before = await cost(redis_client)
    assert (await api.get("/rate-limits")).status_code == 200
    reads, scripts = (
        after - was for after, was in zip(await cost(redis_client), before, strict=True)
    )

    # each key's bucket is still read by the one script that reads buckets (take_tokens,
    # cost 0), but in one pipeline after the declarations' HGETALL: 2 round trips (one
    # per key was KEYS + 1: 43 read events here); the other two are this test's INFOs
    assert scripts == KEYS
    assert reads <= 2 + 2, f"{reads} read events for one GET /rate-limits of {KEYS} keys"
