"""A live feed's reads: the entries after its position, and how many trimming took unread."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from app.store.redis.connection import async_client
from app.store.redis.feeds import read_group, wait_for_news
from app.store.runs.store import RunStore
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


async def test_one_wait_covers_many_streams_and_names_those_with_news(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    runs = [await new_run(run_store) for _ in range(3)]
    positions = {key: (await run_store.feed_start(run_id))[0] for run_id, key in runs}
    assert await wait_for_news(redis_client, positions, block_ms=10) == set()
    waiting = asyncio.create_task(wait_for_news(redis_client, positions, block_ms=5000))
    await asyncio.sleep(0.1)
    _, woken_key = runs[1]
    await append(redis_client, woken_key, range(2))
    assert await asyncio.wait_for(waiting, timeout=5) == {woken_key}


async def test_a_stream_not_created_yet_is_waited_on_like_any_other(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    key = f"{prefix}:{{default}}:events:none-yet"
    waiting = asyncio.create_task(wait_for_news(redis_client, {key: "0-0"}, block_ms=5000))
    await asyncio.sleep(0.1)
    await redis_client.xadd(key, {"type": "token"})
    assert await asyncio.wait_for(waiting, timeout=5) == {key}


async def test_one_node_shares_one_wait_and_a_cluster_groups_by_hash_tag(
    redis_client: aioredis.Redis,
) -> None:
    assert read_group(redis_client, "lh:{mail}:events:x") == read_group(
        redis_client, "lh:{default}:activity"
    )
    cluster = async_client("redis+cluster://127.0.0.1:1")  # connects on first use: never here
    assert read_group(cluster, "lh:{mail}:events:x") == read_group(cluster, "lh:{mail}:activity")
    assert read_group(cluster, "lh:{mail}:activity") != read_group(cluster, "lh:{default}:activity")


async def test_reading_after_a_flushed_script_cache_still_works(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    position, added = await run_store.feed_start(run_id)
    await append(redis_client, key, range(3))
    await redis_client.script_flush()
    read = await run_store.read_new_events(run_id, after=position, added=added)
    assert [event.data["i"] for event in read.events] == [0, 1, 2]
