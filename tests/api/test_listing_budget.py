"""GET /runs stops at a scan budget: a filter that matches little costs Redis a bounded read.

Issue 35's attack: ``GET /runs?metadata.k=<no match>`` over 2,000 runs with 50 KB of
metadata each had Redis send ~100 MB per request (63.5 ms of its CPU). Here the same
shape, scaled down, against the session's real redis-server: what one request makes
Redis send (``INFO stats`` ``total_net_output_bytes``) stays within the byte budget,
and following the cursors still finds every match exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.runs.answers import Created
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.api.conftest import api_with

RUNS = 300
METADATA_BYTES = 50_000
SCAN_BUDGET_BYTES = 1_048_576
# what a call may read past the budget: one chunk of index entries and summaries
# (LIST_SCAN_CHUNK, 200 runs of a few hundred bytes) and the commands' framing
SLACK_BYTES = 200_000


@pytest.fixture
async def budget_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An API whose listings may read SCAN_BUDGET_BYTES per call."""
    async with api_with(settings, list_scan_budget_bytes=SCAN_BUDGET_BYTES) as client:
        yield client


async def seed(run_store: RunStore) -> set[str]:
    """RUNS runs with METADATA_BYTES of metadata each (runs made before any metadata bound,
    as the attack's were); every 37th is tagged ``k=wanted``. The tagged runs' ids."""
    news = [
        NewRun(
            handler="demo.echo",
            input={"message": str(i)},
            metadata={"blob": "x" * METADATA_BYTES, "k": "wanted" if i % 37 == 0 else "other"},
        )
        for i in range(RUNS)
    ]
    created: list[Created | Exception] = []
    for start in range(0, RUNS, 50):
        created.extend(await run_store.create_many(news[start : start + 50]))
    assert all(isinstance(outcome, Created) for outcome in created)
    pairs = zip(cast(list[Created], created), news, strict=True)
    return {outcome.run.id for outcome, new in pairs if new.metadata["k"] == "wanted"}


async def sent_bytes(client: aioredis.Redis) -> int:
    return int((await client.info("stats"))["total_net_output_bytes"])


async def walk(
    api: httpx.AsyncClient, client: aioredis.Redis, params: dict[str, str]
) -> list[tuple[dict[str, Any], int]]:
    """Every page of a listing, following next_cursor, with what Redis sent for each."""
    pages = []
    cursor = None
    while True:
        before = await sent_bytes(client)
        response = await api.get(
            "/runs", params={**params, **({"cursor": cursor} if cursor else {})}
        )
        sent = await sent_bytes(client) - before
        assert response.status_code == 200, response.text
        page = response.json()
        pages.append((page, sent))
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "the walk does not end"


async def test_a_metadata_filter_that_matches_nothing_reads_at_most_the_budget_per_request(
    budget_api: httpx.AsyncClient, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    await seed(run_store)

    pages = await walk(budget_api, redis_client, {"metadata.k": "nobody"})

    # the attack read every run's metadata in one request (~15 MB here); now each
    # request stops at the budget, says so, and hands back a cursor to go on from
    assert all(page["items"] == [] for page, _ in pages)
    assert [page["truncated"] for page, _ in pages[:-1]] == ["scan_budget"] * (len(pages) - 1)
    assert pages[-1][0]["truncated"] is None and pages[-1][0]["next_cursor"] is None
    largest = max(sent for _, sent in pages)
    assert largest <= SCAN_BUDGET_BYTES + SLACK_BYTES, f"one request made Redis send {largest}"
    total = sum(sent for _, sent in pages)
    assert total >= RUNS * METADATA_BYTES  # the walk did read every run's metadata, once
    assert len(pages) >= RUNS * METADATA_BYTES // SCAN_BUDGET_BYTES


async def test_following_the_cursors_returns_every_match_exactly_once(
    budget_api: httpx.AsyncClient, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    wanted = await seed(run_store)

    params = {"metadata.k": "wanted", "include": "metadata", "limit": "3"}
    pages = await walk(budget_api, redis_client, params)

    ids = [item["id"] for page, _ in pages for item in page["items"]]
    assert sorted(ids) == sorted(wanted) and len(ids) == len(set(ids))
    assert all(item["metadata"]["k"] == "wanted" for page, _ in pages for item in page["items"])
    assert any(page["truncated"] == "scan_budget" for page, _ in pages)
    assert max(sent for _, sent in pages) <= SCAN_BUDGET_BYTES + SLACK_BYTES


async def test_a_run_count_budget_stops_a_summary_filter_too(
    settings: Settings, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    sleeper = await run_store.create(NewRun(handler="demo.sleep", input={"seconds": 0}))
    await run_store.create_many([NewRun(handler="demo.echo", input={}) for _ in range(100)])

    async with api_with(settings, list_scan_budget_runs=40) as api:
        pages = await walk(api, redis_client, {"handler": "demo.sleep"})

    # 101 runs, 40 looked at per call: two empty pages that say why, then the match
    assert [(page["items"], page["truncated"]) for page, _ in pages[:2]] == [
        ([], "scan_budget"),
        ([], "scan_budget"),
    ]
    assert [item["id"] for item in pages[2][0]["items"]] == [sleeper.run.id]
    assert len(pages) == 3 and pages[2][0]["truncated"] is None
