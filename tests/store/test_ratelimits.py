"""Rate-limit buckets (GCRA) on the real Redis: limit + burst, 429 pushes, declarations."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from app.errors import RateLimitNotDeclared, RateLimitsFull
from app.models.read import RateLimitSpec
from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.ratelimits.store import Declared, RateLimitStore, matches, valid_name
from app.store.redis.connection import async_client


def store(client: aioredis.Redis, settings: Settings, max_keys: int = 10) -> RateLimitStore:
    return RateLimitStore(client, scripts=Scripts(), prefix=settings.prefix, max_keys=max_keys)


def worst_window(times_ms: Sequence[int], window_ms: int) -> int:
    """The most timestamps inside any closed window of ``window_ms``."""
    ordered, most, start = sorted(times_ms), 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] > window_ms:
            start += 1
        most = max(most, end - start + 1)
    return most


async def _taker(rate: RateLimitStore, bucket: Declared, stop_at_ms: int) -> list[int]:
    """Take one token at a time until the Redis clock passes ``stop_at_ms``; grant times."""
    granted: list[int] = []
    while True:
        token = await rate.take(bucket, cost=1, max_wait_ms=0)
        if token.now_ms >= stop_at_ms:
            return granted
        if token.granted:
            granted.append(token.now_ms)
        else:
            await asyncio.sleep(min(token.wait_ms, 20) / 1000)


async def test_concurrent_takers_never_pass_limit_plus_burst_in_any_window(
    redis_url: str, settings: Settings
) -> None:
    """Eight takers on four connections race for 2.5 s: every 1 s window holds <= 20 + 5."""
    spec = RateLimitSpec(limit=20, period_s=1.0, burst=5)
    bucket = Declared("openai", "openai", spec)
    clients = [async_client(redis_url) for _ in range(4)]
    try:
        stores = [store(client, settings) for client in clients]
        start = (await stores[0].take(bucket, cost=0, max_wait_ms=0)).now_ms
        results = await asyncio.gather(
            *(_taker(stores[i % 4], bucket, start + 2500) for i in range(8))
        )
    finally:
        for client in clients:
            await client.aclose()
    granted = [t for taker in results for t in taker]
    assert worst_window(granted, 1000) <= spec.limit + spec.burst
    assert worst_window(granted, 0) <= spec.burst  # at one instant: the burst at most
    # and it is a rate limit, not a stop: close to 5 + 20 * 2.5 passed
    assert len(granted) >= 40


async def test_reserved_tokens_are_staggered_one_interval_apart(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    """Ten waiters reserving at once get ten distinct times, 100 ms apart after the burst."""
    bucket = Declared("crm:acme", "crm:{tenant}", RateLimitSpec(limit=10, period_s=1.0, burst=2))
    rate = store(redis_client, settings)
    tokens = await asyncio.gather(*(rate.take(bucket, cost=1, max_wait_ms=5000) for _ in range(10)))
    assert all(token.granted for token in tokens)
    until = sorted(token.until_ms for token in tokens)
    assert worst_window(until, 1000) <= 10 + 2
    assert sum(1 for token in tokens if token.wait_ms == 0) <= 2
    gaps = [b - a for a, b in itertools.pairwise(until[2:])]
    assert all(90 <= gap <= 110 for gap in gaps), gaps


async def test_a_take_past_max_wait_takes_nothing(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    bucket = Declared("slow", "slow", RateLimitSpec(limit=1, period_s=60.0, burst=1))
    rate = store(redis_client, settings)
    assert (await rate.take(bucket, cost=1, max_wait_ms=0)).granted
    refused = await rate.take(bucket, cost=1, max_wait_ms=1000)
    assert not refused.granted
    assert 55_000 <= refused.wait_ms <= 60_000
    again = await rate.take(bucket, cost=1, max_wait_ms=1000)  # the refusal reserved nothing
    assert again.wait_ms <= refused.wait_ms


async def test_a_429_push_blocks_every_taker_until_retry_after_then_refills_gradually(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    bucket = Declared("openai", "openai", RateLimitSpec(limit=100, period_s=1.0, burst=50))
    rate = store(redis_client, settings)
    assert (await rate.state(bucket)).available == 50
    until_ms = (await rate.push(bucket, retry_after_ms=2000)).until_ms
    token = await rate.take(bucket, cost=1, max_wait_ms=0)
    assert not token.granted
    assert token.until_ms >= until_ms - 1
    assert 1900 <= until_ms - token.now_ms <= 2000
    # waiting past Retry-After finds one token, not the burst: the bucket refills
    reserved = await rate.take(bucket, cost=1, max_wait_ms=3000)
    assert reserved.granted and reserved.until_ms >= until_ms
    assert reserved.remaining == 0
    # a push never moves the bucket back
    assert (await rate.push(bucket, retry_after_ms=10)).until_ms >= until_ms


async def test_a_cost_above_the_burst_is_refused_and_takes_nothing(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    bucket = Declared("openai", "openai", RateLimitSpec(limit=10, period_s=1.0, burst=3))
    rate = store(redis_client, settings)
    with pytest.raises(ResponseError, match="cost"):
        await rate.take(bucket, cost=4, max_wait_ms=60_000)
    assert (await rate.state(bucket)).available == 3


async def test_declarations_are_bounded_and_templates_resolve(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    rate = store(redis_client, settings, max_keys=2)
    spec = RateLimitSpec(limit=60, period_s=60, burst=10)
    assert await rate.declare("openai", spec)
    assert await rate.declare("crm:{tenant}", RateLimitSpec(limit=5))
    assert not await rate.declare("openai", RateLimitSpec(limit=30))  # a change, not a third
    with pytest.raises(RateLimitsFull):
        await rate.declare("anthropic", spec)
    assert (await rate.resolve("openai")).spec.limit == 30
    found = await rate.resolve("crm:acme")
    assert (found.name, found.spec.limit) == ("crm:{tenant}", 5)
    for unknown in ("crm:acme:eu", "crm", "anthropic", "bad{key}", ""):
        with pytest.raises(RateLimitNotDeclared):
            await rate.resolve(unknown, fresh=True)
    assert await rate.undeclare("openai")
    with pytest.raises(RateLimitNotDeclared):
        await rate.resolve("openai")


def test_names_and_template_matching() -> None:
    assert valid_name("openai") and valid_name("crm:{tenant}") and valid_name("a.b-c_d:e")
    for bad in (
        "",
        "x" * 65,
        "a:b:c:d:e",
        "crm:{Tenant}",
        "{",
        "a b",
        "a:",
        "crm:{t}x",
        "{t}",
        "{a}:{b}",
        "{t}:crm",
    ):
        assert not valid_name(bad), bad
    assert matches("crm:{tenant}", "crm:acme")
    assert not matches("crm:{tenant}", "crm:acme:eu")
    assert not matches("crm:{tenant}", "erp:acme")
