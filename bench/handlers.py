"""Bench-only handlers, loaded by the benchmark's workers with
``LEASEHOLD_HANDLERS=app.demo,bench.handlers``.

``bench.lat`` records when it started, next to the producer's timestamp taken
right before the create call: the same enqueue→start method as the peer
harness (``/work/shared/bench-peers/common.py:mark_latency``). The start time
is taken as the handler's first statement; writing it to Redis afterwards does
not count against the latency.

``bench.ticks`` and ``bench.tokens`` feed the event-stream benchmark
(:mod:`bench.sse`). Both wait until the benchmark sets their go key (every
follower attached), so no event is emitted before the followers listen:
``bench.ticks`` then emits at a steady rate, each event carrying its wall-clock
emit time (delivery latency = receive time - ``t``, one machine's clock);
``bench.tokens`` emits as fast as it can and returns how long its emit loop took.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field

from app.executor import RunContext, RunFailure, handler
from app.settings import load_settings
from app.store.redis.connection import async_client

LATENCY_KEY = "bench:lat"  # outside every queue's namespace, like the peers' bench:lat
GO_KEY = "bench:sse:go:{run_id}"  # set by bench.sse once the run's followers are attached
GO_POLL_S = 0.005

_client: aioredis.Redis | None = None


class LatencyInput(BaseModel):
    """The producer's wall-clock time (epoch seconds) right before it created the run."""

    enqueued_at: float
    # how long the handler runs after its stamp (bench.latency_steps --hold-ms): runs that
    # overlap, so a create may come while the worker's last hand-off still runs
    hold_s: float = 0.0


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
    if params.hold_s:
        await asyncio.sleep(params.hold_s)
    return {}


class TicksInput(BaseModel):
    """How many events to emit, at what steady rate, and how long to wait for the go."""

    count: int = Field(default=200, ge=1)
    rate_per_s: float = Field(default=20.0, gt=0)
    go_timeout_s: float = Field(default=300.0, gt=0)


class TokensInput(BaseModel):
    """How many token events to emit back to back."""

    count: int = Field(default=100_000, ge=1)
    go_timeout_s: float = Field(default=300.0, gt=0)


async def wait_for_go(run_id: str, timeout_s: float) -> None:
    """Return once the benchmark set this run's go key; a RunFailure after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    key = GO_KEY.format(run_id=run_id)
    while not await _redis().exists(key):
        if time.monotonic() > deadline:
            raise RunFailure("no go from the benchmark", code="bench_no_go", retryable=False)
        await asyncio.sleep(GO_POLL_S)


@handler("bench.ticks")
async def ticks(ctx: RunContext, params: TicksInput) -> dict[str, Any]:
    """Emit ``tick`` events ``{"seq", "t"}`` on a fixed schedule (``t``: epoch seconds).

    The schedule is absolute (event i is due at start + i / rate), so a late
    wake-up does not shift every later event.
    """
    await wait_for_go(ctx.run_id, params.go_timeout_s)
    start = time.monotonic()
    for seq in range(params.count):
        await asyncio.sleep(max(0.0, start + seq / params.rate_per_s - time.monotonic()))
        await ctx.emit("tick", {"seq": seq, "t": time.time()})
    return {"emitted": params.count}


@handler("bench.tokens")
async def tokens(ctx: RunContext, params: TokensInput) -> dict[str, Any]:
    """Emit ``token`` events ``{"i", "text"}`` as fast as ``ctx.emit`` takes them.

    Returns the emit loop's wall-clock bounds (epoch seconds); the events are
    flushed after it, before the terminal write.
    """
    await wait_for_go(ctx.run_id, params.go_timeout_s)
    first_emit_at = time.time()
    loop_start = time.perf_counter()
    for i in range(params.count):
        await ctx.emit("token", {"i": i, "text": " tok"})
    loop_s = time.perf_counter() - loop_start
    return {"emit_loop_s": loop_s, "first_emit_at": first_emit_at, "last_emit_at": time.time()}


FAN_KEY = "bench:fan:{run_id}"  # hash: what bench.fan measured, read by bench.children


class FanInput(BaseModel):
    """How many ``demo.echo`` children to spawn on which queue, and whether to join them."""

    n: int = Field(default=1000, ge=1, le=100_000)
    queue: str = "kids"
    join: bool = True


@handler("bench.fan")
async def fan(ctx: RunContext, params: FanInput) -> dict[str, Any]:
    """Spawn ``n`` children, timing the spawns; join them (settled), timing the replay.

    A join parks the run and calls it again from the top once every child ended:
    the spawns then replay (each answers the recorded child), which is part of
    what a fan-in costs, so the second pass's spawn time is recorded apart.
    """
    key = FAN_KEY.format(run_id=ctx.run_id)
    # not a checkpoint: one saves the spawn count, so the pass after the join would spawn
    # n new children rather than replay these (and fan in twice)
    first_pass = not await _redis().hexists(key, "spawn_s")
    t0 = time.perf_counter()
    children = [
        await ctx.spawn("demo.echo", {"i": i}, queue=params.queue, on_parent_end="detach")
        for i in range(params.n)
    ]
    spawn_s = time.perf_counter() - t0
    if first_pass:
        await _redis().hset(key, mapping={"spawn_s": spawn_s, "spawned_at": time.time()})
    else:
        await _redis().hset(key, mapping={"replay_s": spawn_s, "resumed_at": time.time()})
    if not params.join:
        return {"n": params.n}
    outcomes = await ctx.join(children, mode="settled")
    await _redis().hset(key, "joined_at", time.time())
    return {"n": params.n, "succeeded": sum(1 for o in outcomes if o.succeeded)}
