"""A live feed's reads: the entries after its position, and how many trimming took unread."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from app.store.runs import RunStore
from tests.support.streams import append, new_run


async def test_a_read_counts_the_entries_trimmed_after_the_position(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    await append(redis_client, key, range(30), maxlen=10)
    read = await run_store.read_new_events(run_id, after=position, added=added)
    assert read.missing == 20
    assert [event.data["i"] for event in read.events] == list(range(20, 30))


async def test_trimming_only_what_the_feed_has_read_is_no_gap(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    await append(redis_client, key, range(5))
    first = await run_store.read_new_events(run_id, after=position, added=added)
    assert first.missing == 0
    position, added = first.events[-1].id, added + len(first.events)
    await append(redis_client, key, range(5, 8), maxlen=3)  # the feed's position is gone too
    second = await run_store.read_new_events(run_id, after=position, added=added)
    assert second.missing == 0
    assert [event.data["i"] for event in second.events] == [5, 6, 7]


async def test_a_read_returns_at_most_count_entries_oldest_first(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    await append(redis_client, key, range(10))
    read = await run_store.read_new_events(run_id, after=position, added=added, count=4)
    assert [event.data["i"] for event in read.events] == [0, 1, 2, 3]
    assert read.missing == 0


async def test_a_feed_on_a_run_without_a_stream_starts_at_the_beginning(
    run_store: RunStore,
) -> None:
    assert await run_store.feed_start("default.01HZZZZZZZZZZZZZZZZZZZZZZZ") == ("0-0", 0)


async def test_waiting_reads_what_came_or_nothing_after_the_timeout(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    idle = await run_store.wait_and_read(run_id, after=position, added=added, block_ms=10)
    assert idle.events == [] and idle.missing == 0
    waiting = asyncio.create_task(
        run_store.wait_and_read(run_id, after=position, added=added, block_ms=5000)
    )
    await asyncio.sleep(0.1)
    await append(redis_client, key, range(30), maxlen=10)
    read = await asyncio.wait_for(waiting, timeout=5)
    assert read.missing == 20
    assert [event.data["i"] for event in read.events] == list(range(20, 30))


async def test_waiting_survives_a_flushed_script_cache(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    await append(redis_client, key, range(3))
    await redis_client.script_flush()
    read = await run_store.wait_and_read(run_id, after=position, added=added, block_ms=10)
    assert [event.data["i"] for event in read.events] == [0, 1, 2]
