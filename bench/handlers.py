"""Bench-only handlers, loaded by the benchmark's workers with
``LEASEHOLD_HANDLERS=app.demo,bench.handlers``.

``bench.lat`` records when it started, next to the producer's timestamp taken
right before the create call: the same enqueue→start method as the peer
harness (``/work/shared/bench-peers/common.py:mark_latency``). The start time
is taken as the handler's first statement; writing it to Redis afterwards does
not count against the latency.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel

from app.executor import RunContext, handler
from app.settings import load_settings
from app.store.connection import async_client

LATENCY_KEY = "bench:lat"  # outside every queue's namespace, like the peers' bench:lat

_client: aioredis.Redis | None = None


class LatencyInput(BaseModel):
    """The producer's wall-clock time (epoch seconds) right before it created the run."""

    enqueued_at: float


def _redis() -> aioredis.Redis:
    # one client per worker process, created on first use inside the worker's loop
    global _client
    if _client is None:
        _client = async_client(load_settings().resolved_redis_url(), max_connections=4)
    return _client


@handler("bench.lat")
async def latency(ctx: RunContext, params: LatencyInput) -> dict[str, Any]:
    """Record ``"<enqueued_at> <started_at>"`` (epoch seconds) for the benchmark."""
    started_at = time.time()
    await _redis().rpush(LATENCY_KEY, f"{params.enqueued_at} {started_at}")
    return {}
