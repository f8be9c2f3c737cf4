"""The worker registry: each live executor advertises itself with a TTL.

An advertisement is a JSON string that expires after a few heartbeats, plus an
entry in a zset scored by its last heartbeat, so ``GET /workers`` can list live
workers without scanning the keyspace and stale ones vanish on their own.
"""

from __future__ import annotations

from typing import Any, cast

from app.models import WorkerInfo
from app.store.connection import AsyncRedis
from app.store.keys import GlobalKeys


def advertise(pipe: Any, prefix: str, info: WorkerInfo, ttl_ms: int) -> None:
    """Queue the commands that (re)advertise a worker on a sync or async pipeline."""
    keys = GlobalKeys(prefix)
    pipe.set(keys.worker(info.id), info.model_dump_json(), px=ttl_ms)
    pipe.zadd(keys.workers, {info.id: int(info.last_heartbeat_at.timestamp() * 1000)})


def withdraw(pipe: Any, prefix: str, worker_id: str) -> None:
    """Queue the commands that remove a worker's advertisement (clean shutdown)."""
    keys = GlobalKeys(prefix)
    pipe.delete(keys.worker(worker_id))
    pipe.zrem(keys.workers, worker_id)


async def list_workers(client: AsyncRedis, prefix: str) -> list[WorkerInfo]:
    """Every worker whose advertisement has not expired, most recently seen first.

    One pipelined GET per worker rather than an MGET: the advertisements hash to
    different slots, which a Redis Cluster refuses in one MGET.
    """
    keys = GlobalKeys(prefix)
    ids = cast(list[str], await client.zrevrange(keys.workers, 0, -1))
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.get(keys.worker(worker_id))
    raw: list[str | None] = await pipe.execute()
    gone = [worker_id for worker_id, value in zip(ids, raw, strict=True) if value is None]
    if gone:
        await client.zrem(keys.workers, *gone)
    return [WorkerInfo.model_validate_json(value) for value in raw if value is not None]
