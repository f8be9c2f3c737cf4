"""Rate limits across real workers: the limit + burst bound from timestamps, 429s, releases."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from app.models import RunStatus
from app.models.read import RateLimitSpec
from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.ratelimits.store import RateLimitStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.store.test_ratelimits import worst_window
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes
from tests.support.rate_handlers import calls_key


async def declare(
    client: aioredis.Redis, settings: Settings, key: str, spec: RateLimitSpec
) -> None:
    store = RateLimitStore(client, scripts=Scripts(), prefix=settings.prefix, max_keys=10)
    await store.declare(key, spec)


async def recorded(client: aioredis.Redis, prefix: str, key: str) -> list[tuple[int, int]]:
    """Each call on ``key``: (ms it ran at, ms its grant was counted at), Redis clock."""
    rows = [row.split() for row in await client.lrange(calls_key(prefix, key), 0, -1)]
    return [(int(called_us) // 1000, int(grant_ms)) for called_us, grant_ms in rows]


async def create(store: RunStore, handler: str, count: int, **params: object) -> list[str]:
    ids = []
    for _ in range(count):
        ids.append((await store.create(NewRun(handler=handler, input=params))).run.id)
    return ids


async def finish_all(store: RunStore, ids: list[str]) -> list[object]:
    return await asyncio.gather(
        *(wait_status(store, run_id, RunStatus.SUCCEEDED, timeout_s=90) for run_id in ids)
    )


async def test_calls_of_every_worker_never_pass_limit_plus_burst_and_waits_are_visible(
    processes: Processes,
    run_store: RunStore,
    redis_client: aioredis.Redis,
    settings: Settings,
    prefix: str,
) -> None:
    """Three workers x 4 runs at once, 36 calls on one 10/s bucket (burst 3)."""
    spec = RateLimitSpec(limit=10, period_s=1.0, burst=3)
    await declare(redis_client, settings, "openai", spec)
    for _ in range(3):
        processes.worker("--concurrency", "4")
    ids = await create(run_store, "test.rate_call", 12, key="openai", calls=3)
    runs = await finish_all(run_store, ids)
    owners = {run.output["owner"] for run in runs}  # type: ignore[attr-defined]
    assert len(owners) >= 2, "the calls came from one worker only"
    calls = await recorded(redis_client, prefix, "openai")
    assert len(calls) == 36
    # the bound holds for the grants, the times the bucket counted: a call runs at its
    # grant or later (a loaded machine wakes the handler late), never before it
    assert worst_window([grant for _, grant in calls], 1000) <= spec.limit + spec.burst
    # 1 ms for the rounding of the wait (ms) and the TIME call's µs truncated to ms
    assert all(called >= grant - 1 for called, grant in calls), calls
    waits = [
        event.data
        for run_id in ids
        for event in await run_store.read_events(run_id)
        if event.type == "wait"
    ]
    assert waits, "36 calls on a 10/s bucket and nobody waited"
    assert all(w["kind"] == "rate_limited" and w["key"] == "openai" for w in waits)
    assert all(w["until_ms"] > 0 and w["wait_ms"] > 0 for w in waits)


async def test_a_429_reported_by_one_handler_slows_every_worker_using_the_key(
    processes: Processes,
    run_store: RunStore,
    redis_client: aioredis.Redis,
    settings: Settings,
    prefix: str,
) -> None:
    await declare(redis_client, settings, "crm:acme", RateLimitSpec(limit=50, burst=20))
    for _ in range(2):
        processes.worker("--concurrency", "3")
    (reporter,) = await create(
        run_store, "test.rate_429", 1, key="crm:acme", retry_after_s=6.0, release=False
    )
    # the push happened once the reporter waits for its own next token
    waits = await eventually(
        lambda: run_store.read_events(reporter),
        until=lambda events: any(event.type == "wait" for event in events),
        what="the reporter's wait after its 429",
    )
    until_ms = next(event for event in waits if event.type == "wait").data["until_ms"]
    # created well inside the 6 s: four runs held at once, on both workers
    ids = await create(run_store, "test.rate_call", 4, key="crm:acme", calls=2)
    runs = await finish_all(run_store, [reporter, *ids])
    # the reporter holds one of its worker's 3 slots: the four need both workers
    assert len({run.output["owner"] for run in runs[1:]}) == 2  # type: ignore[attr-defined]
    calls = await recorded(redis_client, prefix, "crm:acme")
    assert len(calls) == 9  # the reporter's own call, then everyone's
    # nobody, on any worker, was granted or called before Retry-After
    assert min(min(called, grant) for called, grant in calls) >= until_ms - 1


async def test_a_released_rate_limited_run_keeps_its_attempt_count(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    await declare(redis_client, settings, "openai", RateLimitSpec(limit=100, burst=5))
    processes.worker()
    created = await run_store.create(
        NewRun(
            handler="test.rate_429",
            input={"key": "openai", "retry_after_s": 1.0},
            max_attempts=1,
        )
    )
    run = await wait_status(run_store, created.run.id, RunStatus.SUCCEEDED, timeout_s=60)
    assert run.output is not None and run.output["attempt"] == 1 and run.attempt == 1
    events = await run_store.read_events(run.id)
    types = [event.type for event in events]
    assert types.count("claimed") == 2 and "released" in types
    wait = next(event for event in events if event.type == "wait")
    assert wait.data["released"] is True and wait.data["reason"] == "upstream_429"
    released = next(event for event in events if event.type == "released")
    assert released.data["reason"] == "upstream_429"
    assert released.data["run_at_ms"] >= wait.data["until_ms"] - 5
    second_claim = [event for event in events if event.type == "claimed"][1]
    assert second_claim.ts.timestamp() * 1000 >= wait.data["until_ms"] - 5


async def test_a_token_further_than_the_longest_wait_releases_the_run_until_then(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """One token per 3 s, waits of at most 0.5 s: the second run is released, not held."""
    await declare(redis_client, settings, "slow", RateLimitSpec(limit=1, period_s=3.0))
    processes.worker(LEASEHOLD_RATE_LIMIT_MAX_WAIT_S="0.5")
    ids = await create(run_store, "test.rate_call", 2, key="slow", calls=1)
    runs = await finish_all(run_store, ids)
    assert all(run.attempt == 1 for run in runs)  # type: ignore[attr-defined]
    released = [
        run_id
        for run_id in ids
        if "released" in [event.type for event in await run_store.read_events(run_id)]
    ]
    assert len(released) == 1


async def test_an_operation_budget_does_not_count_the_wait_for_its_token(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """first_progress_s=1 and a 2.5 s wait for the token: the operation still succeeds."""
    await declare(redis_client, settings, "slow", RateLimitSpec(limit=1, period_s=2.5))
    processes.worker()
    ids = await create(run_store, "test.rate_call", 2, key="slow", calls=1, first_progress_s=1.0)
    runs = await finish_all(run_store, ids)
    assert [run.status for run in runs] == [RunStatus.SUCCEEDED] * 2  # type: ignore[attr-defined]
    assert all(run.error is None for run in runs)  # type: ignore[attr-defined]
    waits = [
        event.data
        for run_id in ids
        for event in await run_store.read_events(run_id)
        if event.type == "wait" and event.data.get("kind") == "rate_limited"
    ]
    # one run waited for its token longer than the operation's 1 s first-progress budget
    assert any(wait["key"] == "slow" and wait["wait_ms"] > 1000 for wait in waits), waits


async def test_the_demo_quota_handler_shares_one_bucket_and_says_when_it_waits(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    await declare(redis_client, settings, "demo.model", RateLimitSpec(limit=10, burst=1))
    processes.worker()
    ids = await create(run_store, "demo.quota", 2, calls=3)
    await finish_all(run_store, ids)
    events = [event for run_id in ids for event in await run_store.read_events(run_id)]
    assert len([event for event in events if event.type == "progress"]) == 6
    assert any(event.type == "wait" and event.data["key"] == "demo.model" for event in events)
