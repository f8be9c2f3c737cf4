"""Handlers for the tests of runs that start runs (registered by every test worker).

Like the wait handlers, each reports what its attempts really did through a Redis
list the test owns ("<fence>:<what>:<owner>"), so a test can poll for a moment
(spawn returned, the join parked) instead of sleeping, and count what ran.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from app.executor import RunContext, SpawnRefused, handler
from app.store.redis.connection import async_client


def trail_key(prefix: str, run_id: str) -> str:
    """List of "<fence>:<what>:<owner>" lines, one per step an attempt of the run took."""
    return f"{prefix}:test:family:{run_id}"


def hold_key(prefix: str, run_id: str) -> str:
    """Set by the first attempt that reaches a hold: later attempts go on past it."""
    return f"{prefix}:test:family-hold:{run_id}"


async def _trail(ctx: RunContext, what: str, *, hold: bool = False) -> bool:
    """Append ``what``; with ``hold``, True for the first attempt to get there (it then hangs)."""
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    prefix = os.environ["LEASEHOLD_PREFIX"]
    try:
        await client.rpush(trail_key(prefix, ctx.run_id), f"{ctx.fence}:{what}:{ctx.owner_id}")
        return bool(hold and await client.set(hold_key(prefix, ctx.run_id), "1", nx=True))
    finally:
        await client.aclose()


class FanOutInput(BaseModel):
    children: int = 1
    handler: str = "demo.echo"
    child_input: dict[str, Any] = {}
    queue: str | None = None
    on_parent_end: str = "cancel"
    # the first attempt hangs right after its spawns returned, before any checkpoint
    hang_after_spawn: bool = False


@handler("test.fan_out")
async def fan_out(ctx: RunContext, params: FanOutInput) -> dict[str, Any]:
    """Spawn ``children`` children; return their ids (no join)."""
    ids = []
    for _ in range(params.children):
        child = await ctx.spawn(
            params.handler,
            params.child_input,
            queue=params.queue,
            on_parent_end=params.on_parent_end,
        )
        ids.append(child.id)
    if await _trail(ctx, "spawned:" + ",".join(ids), hold=params.hang_after_spawn):
        await asyncio.Event().wait()  # until the test kills this worker
    return {"children": ids}


class SpawnInput(BaseModel):
    handler: str = "demo.echo"
    input: Any = None
    queue: str | None = None
    options: dict[str, Any] = {}


@handler("test.spawn_one")
async def spawn_one(ctx: RunContext, params: SpawnInput) -> dict[str, Any]:
    """Spawn one child as told (hostile arguments welcome): its id."""
    child = await ctx.spawn(params.handler, params.input, queue=params.queue, **params.options)
    return {"child": child.id}


class BombInput(BaseModel):
    pass


@handler("test.fork_bomb")
async def fork_bomb(ctx: RunContext, params: BombInput) -> dict[str, Any]:
    """Spawn itself, twice, for ever, and wait for both: stopped by LEASEHOLD_MAX_RUN_DEPTH."""
    try:
        first = await ctx.spawn("test.fork_bomb", {})
        second = await ctx.spawn("test.fork_bomb", {})
    except SpawnRefused as exc:
        return {"refused": exc.details}
    await ctx.join([first, second])
    return {"children": [first.id, second.id]}


class FanInInput(BaseModel):
    children: int = 2
    handler: str = "demo.echo"
    child_input: dict[str, Any] = {}
    queue: str | None = None
    mode: str = "all"
    timeout_s: float | None = None
    join_ids: list[str] | None = None  # join these instead of the children (hostile joins)


@handler("test.fan_in")
async def fan_in(ctx: RunContext, params: FanInInput) -> dict[str, Any]:
    """Spawn ``children`` children, trail their ids, join them, return what the join gave."""
    kids = [
        await ctx.spawn(params.handler, params.child_input, queue=params.queue)
        for _ in range(params.children)
    ]
    await _trail(ctx, "spawned:" + ",".join(kid.id for kid in kids))
    joined = await ctx.join(
        params.join_ids if params.join_ids is not None else kids,
        mode=params.mode,
        timeout_s=params.timeout_s,
    )
    await _trail(ctx, "joined")
    if params.mode == "settled":
        joined = [
            {"child_id": o.child_id, "status": o.status, "output": o.output, "error": o.error}
            for o in joined
        ]
    return {"children": [kid.id for kid in kids], "joined": joined}
