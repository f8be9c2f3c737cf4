"""Handlers for the durable-wait tests (registered by every test worker).

Each one reports what its attempts really did through a Redis list the test owns
("<fence>:<what>:<owner>"), so a test can tell which worker ran which part and
that the work before a wait's checkpoint ran once.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from app.executor import RunContext, SignalTimeout, handler
from app.store.redis.connection import async_client


def trail_key(prefix: str, run_id: str) -> str:
    """List of "<fence>:<what>:<owner>" lines, one per step an attempt of the run took."""
    return f"{prefix}:test:trail:{run_id}"


async def _trail(ctx: RunContext, what: str) -> None:
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        key = trail_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id)
        await client.rpush(key, f"{ctx.fence}:{what}:{ctx.owner_id}")
    finally:
        await client.aclose()


class NapInput(BaseModel):
    seconds: float


@handler("test.nap")
async def nap(ctx: RunContext, params: NapInput) -> dict[str, Any]:
    """Work once (checkpointed), sleep durably, then finish on whichever worker woke it."""
    if not ctx.state:
        await _trail(ctx, "work")
        await ctx.checkpoint({"worked": True})
    await _trail(ctx, "sleep")
    await ctx.sleep(params.seconds)
    await _trail(ctx, "woke")
    return {"state": ctx.state, "owner": ctx.owner_id}


class SignalInput(BaseModel):
    name: str = "go"
    timeout_s: float | None = None
    catch_timeout: bool = False


@handler("test.await_signal")
async def await_signal(ctx: RunContext, params: SignalInput) -> dict[str, Any]:
    """Return the payload of one signal (or say it timed out, when asked to catch that)."""
    await _trail(ctx, "waiting")
    try:
        payload = await ctx.wait_for_signal(params.name, timeout_s=params.timeout_s)
    except SignalTimeout:
        if not params.catch_timeout:
            raise
        return {"timed_out": True}
    return {"payload": payload}


class TwoSignalsInput(BaseModel):
    first: str = "a"
    second: str = "b"


@handler("test.two_signals")
async def two_signals(ctx: RunContext, params: TwoSignalsInput) -> dict[str, Any]:
    """Wait for two signals in order: the first one's payload replays on the second wake."""
    first = await ctx.wait_for_signal(params.first)
    await _trail(ctx, f"got-{params.first}")
    second = await ctx.wait_for_signal(params.second)
    return {"first": first, "second": second}


class AskInput(BaseModel):
    question: Any = "approve?"


@handler("test.ask")
async def ask(ctx: RunContext, params: AskInput) -> dict[str, Any]:
    """Ask a person and return the answer."""
    answer = await ctx.ask_human(params.question)
    return {"answer": answer}


class BadWaitInput(BaseModel):
    kind: str
    value: Any = None


@handler("test.bad_wait")
async def bad_wait(ctx: RunContext, params: BadWaitInput) -> None:
    """Ask for a wait with a hostile argument: the run must fail invalid_wait, never park."""
    value = params.value
    if params.kind == "sleep":
        await ctx.sleep(float(value) if isinstance(value, str) else value)
    elif params.kind == "sleep_until":
        await ctx.sleep_until(value)
    elif params.kind == "name":
        await ctx.wait_for_signal(value)
    elif params.kind == "timeout":
        await ctx.wait_for_signal("go", timeout_s=float(value) if isinstance(value, str) else value)
    elif params.kind == "question":
        await ctx.ask_human("x" * int(value))


@handler("test.sync_nap")
def sync_nap(ctx: RunContext, params: NapInput) -> dict[str, Any]:
    """A sync handler's durable sleep and signal: the thread's call unwinds at the park."""
    ctx.sleep_sync(params.seconds)
    payload = ctx.wait_for_signal_sync("go")
    return {"payload": payload, "fence": ctx.fence}
