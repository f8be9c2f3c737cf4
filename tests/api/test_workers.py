"""GET /workers marks the dead; POST /workers/{id}/drain refuses what is not a live worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import WorkerInfo
from app.settings import Settings
from app.store.keys import GlobalKeys
from app.store.leases import workers


async def advertise(client: aioredis.Redis, prefix: str, worker_id: str, age_s: float) -> None:
    """A worker advertisement whose last heartbeat was ``age_s`` ago (TTL: 3 lease TTLs)."""
    beat = datetime.now(tz=UTC) - timedelta(seconds=age_s)
    info = WorkerInfo(
        id=worker_id,
        host="h",
        pid=1,
        queues=["default"],
        concurrency=1,
        running=0,
        loop_lag_ms=0.0,
        started_at=beat,
        last_heartbeat_at=beat,
    )
    pipe = client.pipeline(transaction=False)
    workers.advertise(pipe, prefix, info, 30_000)
    await pipe.execute()


async def test_a_worker_silent_for_longer_than_one_ttl_is_listed_not_alive(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, settings: Settings
) -> None:
    await advertise(redis_client, prefix, "w-fresh", 0)
    await advertise(redis_client, prefix, "w-dead", settings.lease_ttl_s * 2)
    listed = {item["id"]: item for item in (await api.get("/workers")).json()}
    assert listed["w-fresh"]["alive"] is True and listed["w-dead"]["alive"] is False
    assert listed["w-fresh"]["draining"] is False


async def test_a_drain_request_lives_no_longer_than_the_advertisement(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await advertise(redis_client, prefix, "w-a", 0)
    assert (await api.post("/workers/w-a/drain")).status_code == 202
    flag = GlobalKeys(prefix).worker_drain("w-a")
    assert await redis_client.get(flag) == "drain"
    assert 0 < await redis_client.pttl(flag) <= 30_000


@pytest.mark.parametrize("worker_id", ["w-nobody", "a" * 128])
async def test_draining_a_worker_nobody_advertises_is_404_and_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, worker_id: str
) -> None:
    response = await api.post(f"/workers/{worker_id}/drain")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert await redis_client.keys(f"{prefix}:*") == []


@pytest.mark.parametrize("worker_id", ["a" * 129, "w x", "w:y", "%00", "ü"])
async def test_a_malformed_worker_id_is_422_and_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, worker_id: str
) -> None:
    response = await api.post(f"/workers/{worker_id}/drain")
    assert response.status_code == 422
    assert await redis_client.keys(f"{prefix}:*") == []
