"""Listing runs page by page: the cursor's walk over the queues' listing indexes (fakeredis).

``RunStore.list_runs`` is Python over plain reads: it merges each queue's listing
index (``ZREVRANGEBYSCORE``, a scan chunk at a time), reads the summaries (``HMGET``),
filters them and cuts pages; no script runs. So these tests run on fakeredis, each on a
Redis of its own, and write the records as a create leaves them for a reader (the hash
fields :func:`app.store.codec.run_from_hash` reads, the index entry scored by
``created_at``, both under the keys :mod:`app.store.keys` builds). That makes cheap the
states a create reaches only slowly: a queue past a scan chunk, runs of two queues
created in the same millisecond, a record gone under its index entry. The scan chunk
and budget are made small so a few runs cross them; nothing here depends on Redis's
clock, expiry, blocking reads or Lua (those are tested against the real redis-server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from fakeredis import aioredis as fake_aioredis

from app.models.read import RunPage
from app.store.codec import new_ulid
from app.store.context import StoreContext
from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import Scripts
from app.store.retention import Retention
from app.store.runs import listing as runs_module
from app.store.runs.listing import ScanBudget
from app.store.runs.store import RunStore

pytestmark = pytest.mark.fakeredis

PREFIX = "t"
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CHUNK = 5  # LIST_SCAN_CHUNK in these tests: a few runs cross it


@pytest.fixture
async def client() -> AsyncIterator[fake_aioredis.FakeRedis]:
    """A Redis of this test's own (a fresh fakeredis server)."""
    client = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def store(client: fake_aioredis.FakeRedis, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    """A run store on ``client`` whose listing scans ``CHUNK`` index entries at a time."""
    monkeypatch.setattr(runs_module, "LIST_SCAN_CHUNK", CHUNK)
    ctx = StoreContext(
        client=client,
        scripts=Scripts(),  # loaded, never sent: listing runs no script
        prefix=PREFIX,
        events_maxlen=100,
        retention=Retention.uniform(60_000),
        lease_ttl_ms=30_000,
        queued_ttl_ms=0,
    )
    return RunStore(ctx)


async def seed(
    client: fake_aioredis.FakeRedis, queue: str, created_ms: list[int], **fields: str
) -> list[str]:
    """Runs of ``queue`` created at ``created_ms``, recorded and indexed; their ids."""
    keys = QueueKeys(PREFIX, queue)
    ids = [f"{queue}.{new_ulid(ms)}" for ms in created_ms]
    pipe = client.pipeline(transaction=False)
    for run_id, ms in zip(ids, created_ms, strict=True):
        record = {"id": run_id, "queue": queue, "handler": "demo.echo", "status": "queued"}
        pipe.hset(keys.run(run_id), mapping={**record, "created_at": str(ms), **fields})
    pipe.zadd(keys.runs, dict(zip(ids, created_ms, strict=True)))
    await pipe.execute()
    return ids


def newest_first(*queues: tuple[list[str], list[int]]) -> list[str]:
    """The ids of the seeded runs in listing order: (created_at, id), descending."""
    pairs = [(ms, run_id) for ids, times in queues for run_id, ms in zip(ids, times, strict=True)]
    return [run_id for _, run_id in sorted(pairs, reverse=True)]


async def walk(store: RunStore, **params: Any) -> list[RunPage]:
    """Every page of a listing, following ``next_cursor`` to the end."""
    pages = [await store.list_runs(**params)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 100, "the walk does not end"
        pages.append(await store.list_runs(**params, cursor=pages[-1].next_cursor))
    return pages


def listed(pages: list[RunPage]) -> list[str]:
    return [run.id for page in pages for run in page.items]


@pytest.mark.parametrize("limit", [1, 4, 7, 100])
async def test_a_walk_across_queues_past_a_scan_chunk_lists_every_run_once_newest_first(
    client: fake_aioredis.FakeRedis, store: RunStore, limit: int
) -> None:
    # "big" holds several scan chunks; "small" was created between them, some runs in
    # the same millisecond as one of "big" (a tie the run id orders)
    big_ms = [BASE_MS + 10 * i for i in range(23)]
    small_ms = [BASE_MS + ms for ms in (15, 40, 40, 101, 200, 220)]
    big = await seed(client, "big", big_ms)
    small = await seed(client, "small", small_ms)

    pages = await walk(store, among=["big", "small", "idle"], limit=limit)

    assert listed(pages) == newest_first((big, big_ms), (small, small_ms))
    assert all(len(page.items) == limit for page in pages[:-1])


@pytest.mark.parametrize("limit", [1, 3, 50])
async def test_runs_created_in_one_millisecond_past_two_scan_chunks_are_all_listed(
    client: fake_aioredis.FakeRedis, store: RunStore, limit: int
) -> None:
    # a schedule's catch-up tick creates up to LEASEHOLD_SCHEDULE_FIRES_PER_TICK_MAX runs
    # in one script call (one created_at): a cursor inside that block has more than a
    # read's window of the block's runs above it; the other queue's runs are all older
    block_ms = [BASE_MS + 50] * (3 * CHUNK + 2)
    older_ms = [BASE_MS + i for i in range(2 * CHUNK)]
    block = await seed(client, "backfilled", block_ms)
    older = await seed(client, "other", older_ms)

    pages = await walk(store, among=["backfilled", "other"], limit=limit)

    assert listed(pages) == newest_first((block, block_ms), (older, older_ms))


async def test_the_declared_queues_are_listed_when_none_is_named(
    client: fake_aioredis.FakeRedis, store: RunStore
) -> None:
    a_ms, b_ms = [BASE_MS + 1, BASE_MS + 3], [BASE_MS + 2]
    a, b = await seed(client, "a", a_ms), await seed(client, "b", b_ms)
    await seed(client, "undeclared", [BASE_MS + 4])  # its runs are not listed without a name
    await client.sadd(GlobalKeys(PREFIX).queues, "a", "b")

    assert listed(await walk(store, limit=2)) == newest_first((a, a_ms), (b, b_ms))


async def test_a_filter_that_a_whole_scan_budget_misses_answers_empty_pages_that_go_on(
    client: fake_aioredis.FakeRedis, store: RunStore
) -> None:
    wanted_ms = [BASE_MS, BASE_MS + 1]
    wanted = await seed(client, "default", wanted_ms, handler="demo.wanted")
    await seed(client, "default", [BASE_MS + 10 + i for i in range(25)])
    budget = ScanBudget(runs=2 * CHUNK)

    pages = await walk(store, queue="default", handler="demo.wanted", limit=10, budget=budget)

    # one call reads at most the budget: the first pages are empty but carry a cursor
    assert [len(page.items) for page in pages] == [0, 0, 2]
    assert [page.truncated for page in pages] == ["scan_budget", "scan_budget", None]
    assert listed(pages) == newest_first((wanted, wanted_ms))


async def test_a_run_whose_record_is_gone_is_left_out_and_its_index_entry_dropped(
    client: fake_aioredis.FakeRedis, store: RunStore
) -> None:
    times = [BASE_MS + i for i in range(3)]
    ids = await seed(client, "default", times)
    keys = QueueKeys(PREFIX, "default")
    await client.delete(keys.run(ids[1]))  # its retention ended; the index still names it

    page = await store.list_runs(queue="default", limit=10)

    assert [run.id for run in page.items] == [ids[2], ids[0]]
    assert await client.zrange(keys.runs, 0, -1) == [ids[0], ids[2]]


async def test_created_before_keeps_only_older_runs_whatever_the_cursor(
    client: fake_aioredis.FakeRedis, store: RunStore
) -> None:
    times = [BASE_MS + i for i in range(10)]
    ids = await seed(client, "default", times)
    bound = BASE_MS + 6  # runs created at or after it are never listed

    bounded = await walk(store, queue="default", limit=2, created_before_ms=bound)
    first = await store.list_runs(queue="default", limit=1)  # a cursor above the bound
    resumed = await store.list_runs(
        queue="default", limit=10, cursor=first.next_cursor, created_before_ms=bound
    )

    assert listed(bounded) == ids[5::-1]
    assert [run.id for run in resumed.items] == ids[5::-1]
