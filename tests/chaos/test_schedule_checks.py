"""The soak's schedule promise on hand-made histories: doubled, off-grid, missed fires."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from app.store.schedules.store import fire_run_id
from tools.chaos.checker import Snapshot, StoredRun
from tools.chaos.schedules import SCHEDULE_ID, check

pytestmark = pytest.mark.chaos

ANCHOR = 1_000_000


def scheduled(*fires: int, run_id: str | None = None) -> dict[str, StoredRun]:
    runs = {}
    for fire in fires:
        rid = run_id or fire_run_id("default", SCHEDULE_ID, fire)
        fields = {"status": "succeeded", "schedule_id": SCHEDULE_ID, "fire_ms": str(fire)}
        runs[f"{rid}#{fire}" if run_id else rid] = StoredRun(rid, fields, [])
    return runs


async def kinds(
    client: aioredis.Redis, prefix: str, runs: dict[str, StoredRun], **record: int
) -> list[str]:
    fields = {
        "anchor_ms": ANCHOR,
        "interval_ms": 1000,
        "fired_count": 3,
        "last_fire_ms": ANCHOR + 3000,
    }
    await client.hset(
        QueueKeys(prefix, "default").schedule(SCHEDULE_ID), mapping={**fields, **record}
    )
    return [v.kind for v in await check(client, prefix, Snapshot(runs, 0))]


async def test_one_run_per_fire_time_and_none_missed_passes(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    # the janitor purged the second run: absent runs are fine, the record counts the fires
    runs = scheduled(ANCHOR + 1000, ANCHOR + 3000)
    assert await kinds(redis_client, prefix, runs) == []


async def test_a_doubled_fire_is_caught(redis_client: aioredis.Redis, prefix: str) -> None:
    doubled = {**scheduled(ANCHOR + 1000), **scheduled(ANCHOR + 1000, run_id="default.X")}
    assert "schedule_fire_doubled" in await kinds(redis_client, prefix, doubled)


async def test_an_off_grid_fire_is_caught(redis_client: aioredis.Redis, prefix: str) -> None:
    assert await kinds(redis_client, prefix, scheduled(ANCHOR + 1500)) == ["schedule_fire_off_grid"]


async def test_a_missed_fire_is_caught(redis_client: aioredis.Redis, prefix: str) -> None:
    assert await kinds(redis_client, prefix, {}, fired_count=2) == ["schedule_fire_missed"]
    assert await kinds(redis_client, prefix, {}, missed_count=1) == ["schedule_fire_missed"]
    never = {"fired_count": 0, "last_fire_ms": ANCHOR}
    assert await kinds(redis_client, prefix, {}, **never) == ["schedule_fire_missed"]
