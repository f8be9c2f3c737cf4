"""The worker registry: each live executor advertises itself with a TTL.

An advertisement is a JSON string that expires after a few heartbeats, plus an
entry in a zset scored by its last heartbeat, so ``GET /workers`` can list live
workers without scanning the keyspace and stale ones vanish on their own. A
worker silent for longer than one lease TTL is listed ``alive: false`` until then
(its leases have run out: the reconciler is taking its runs).

A drain request (``POST /workers/{id}/drain``) is a flag key beside the
advertisement, with the same TTL; the worker reads it in the pipeline of every
advertisement (one GET per heartbeat) and drains as on SIGTERM. A key rather than
pub/sub: a worker reconnecting while the request is made still sees it.
"""

from __future__ import annotations

from typing import Any, cast

from app.models import WorkerInfo
from app.store.keys import GlobalKeys
from app.store.redis.connection import AsyncRedis


def advertise(pipe: Any, prefix: str, info: WorkerInfo, ttl_ms: int) -> None:
    """Queue the commands that (re)advertise a worker on a sync or async pipeline.

    The pipeline's last reply says whether a drain was requested
    (:func:`drain_requested`).
    """
    keys = GlobalKeys(prefix)
    pipe.set(keys.worker(info.id), info.model_dump_json(), px=ttl_ms)
    pipe.zadd(keys.workers, {info.id: int(info.last_heartbeat_at.timestamp() * 1000)})
    pipe.get(keys.worker_drain(info.id))


def drain_requested(replies: list[Any]) -> bool:
    """Whether the replies of an :func:`advertise` pipeline carry a drain request."""
    return bool(replies and replies[-1])


async def request_drain(client: AsyncRedis, prefix: str, worker_id: str) -> bool:
    """Ask a live worker to drain; False (nothing written) when no such worker is advertised.

    The flag lives as long as the advertisement it answers, so a request for a
    worker that dies meanwhile does not outlive it.
    """
    keys = GlobalKeys(prefix)
    ttl_ms = await client.pttl(keys.worker(worker_id))
    if ttl_ms is None or ttl_ms <= 0:
        return False
    await client.set(keys.worker_drain(worker_id), "drain", px=ttl_ms)
    return True


def withdraw(pipe: Any, prefix: str, worker_id: str) -> None:
    """Queue the commands that remove a worker's advertisement (clean shutdown)."""
    keys = GlobalKeys(prefix)
    pipe.delete(keys.worker(worker_id), keys.worker_drain(worker_id))
    pipe.zrem(keys.workers, worker_id)


async def list_workers(client: AsyncRedis, prefix: str, lease_ttl_ms: int) -> list[WorkerInfo]:
    """Every worker whose advertisement has not expired, most recently seen first.

    ``alive`` is false for one whose last heartbeat (the zset's score) is older
    than its own advertised lease TTL (``lease_ttl_ms`` for one that does not say)
    by the Redis clock. One pipelined GET per worker rather
    than an MGET: the advertisements hash to different slots, which a Redis
    Cluster refuses in one MGET.
    """
    keys = GlobalKeys(prefix)
    seen = cast(
        list[tuple[str, float]], await client.zrevrange(keys.workers, 0, -1, withscores=True)
    )
    if not seen:
        return []
    seconds, micros = await client.time()
    now_ms = seconds * 1000 + micros // 1000
    silence_ms = {worker_id: now_ms - score for worker_id, score in seen}
    ids = [worker_id for worker_id, _ in seen]
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.get(keys.worker(worker_id))
    raw: list[str | None] = await pipe.execute()
    gone = [worker_id for worker_id, value in zip(ids, raw, strict=True) if value is None]
    if gone:
        await client.zrem(keys.workers, *gone)
    listed = [WorkerInfo.model_validate_json(value) for value in raw if value is not None]
    return [
        info.model_copy(
            update={"alive": silence_ms.get(info.id, 0) <= (info.lease_ttl_ms or lease_ttl_ms)}
        )
        for info in listed
    ]
