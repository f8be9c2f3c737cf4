"""Handlers for the checkpoint / effect / retry tests (registered by every test worker).

Each one reports what really happened through a side channel the test owns: a
Redis list under the test's prefix, appended to by the handler or by the side
effect itself. "Really happened" means counted outside Leasehold's own records,
so a test can tell a replayed effect from a repeated one.

A handler that must be interrupted "in the middle" hangs only on the run's
first claim (``ctx.fence == 1``): every later owner of the run has a higher
fence (a takeover, a release and a resolve each move it forward).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.executor import RunContext, RunFailure, handler
from app.store.redis.connection import async_client, sync_client

HANG_S = 3600.0


def steps_key(prefix: str, run_id: str) -> str:
    """List of "<attempt>:<step>" for every step ``test.steps`` executed."""
    return f"{prefix}:test:steps:{run_id}"


def calls_key(prefix: str, run_id: str) -> str:
    """List of the idempotency keys ``test.charge``'s side effect was really called with."""
    return f"{prefix}:test:effect-calls:{run_id}"


async def _append(key_for: Any, run_id: str, value: str) -> None:
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        await client.rpush(key_for(os.environ["LEASEHOLD_PREFIX"], run_id), value)
    finally:
        await client.aclose()


def _append_sync(key_for: Any, run_id: str, value: str) -> None:
    client = sync_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        client.rpush(key_for(os.environ["LEASEHOLD_PREFIX"], run_id), value)
    finally:
        client.close()


class StepsInput(BaseModel):
    """A five-step job that checkpoints after each step."""

    steps: int = Field(default=5, ge=1)
    step_s: float = Field(default=0.05, ge=0)
    hang_after_step: int | None = None


@handler("test.steps")
async def steps(ctx: RunContext, params: StepsInput) -> dict[str, Any]:
    """Square each step number; resume after the last checkpointed step."""
    state = ctx.state or {"step": 0, "values": []}
    for step in range(state["step"] + 1, params.steps + 1):
        await _append(steps_key, ctx.run_id, f"{ctx.attempt}:{step}")
        await asyncio.sleep(params.step_s)
        state = {"step": step, "values": [*state["values"], step * step]}
        await ctx.checkpoint(state)
        if step == params.hang_after_step and ctx.fence == 1:
            await asyncio.sleep(HANG_S)  # the test kills or drains the worker here
    return {"values": state["values"]}


class ChargeInput(BaseModel):
    """One side effect, and where the first owner of the run hangs.

    ``blocking_stall_s``: the side effect is a sync function (run in a thread) that
    blocks this long on the first owner, so it finishes even if the run is stopped.
    """

    idempotent: bool = False
    hang: Literal["none", "inside", "after"] = "none"
    fail_after: bool = False
    blocking_stall_s: float = Field(default=0.0, ge=0)


@handler("test.charge")
async def charge(ctx: RunContext, params: ChargeInput) -> dict[str, Any]:
    """Charge once through ``ctx.effect``, checkpoint the receipt, return it."""
    first_owner = ctx.fence == 1

    async def call_payment_api(key: str) -> dict[str, Any]:
        await _append(calls_key, ctx.run_id, key)
        if first_owner and params.hang == "inside":
            await asyncio.sleep(HANG_S)
        return {"charged_by": ctx.owner_id, "fence": ctx.fence, "key": key}

    def call_blocking_payment_api(key: str) -> dict[str, Any]:
        _append_sync(calls_key, ctx.run_id, key)
        if first_owner:
            time.sleep(params.blocking_stall_s)
        return {"charged_by": ctx.owner_id, "fence": ctx.fence, "key": key}

    call = call_blocking_payment_api if params.blocking_stall_s else call_payment_api
    receipt = await ctx.effect("charge", call, idempotent=params.idempotent)
    if first_owner and params.hang == "after":
        await asyncio.sleep(HANG_S)
    if first_owner and params.fail_after:
        raise ConnectionError("the order service went away after the charge")
    await ctx.checkpoint({"receipt": receipt, "by": ctx.owner_id})
    return {"receipt": receipt}


class FlakyInput(BaseModel):
    """Fail the first ``fail_times`` attempts, with a retryable error or not."""

    fail_times: int = Field(default=2, ge=0)
    retryable: bool = True


@handler("test.flaky")
async def flaky(ctx: RunContext, params: FlakyInput) -> dict[str, int]:
    """Raise on early attempts: an untyped error (retryable) or a typed non-retryable one."""
    if ctx.attempt <= params.fail_times:
        if params.retryable:
            raise ConnectionError(f"upstream unavailable on attempt {ctx.attempt}")
        raise RunFailure(f"input rejected on attempt {ctx.attempt}", code="rejected")
    return {"attempt": ctx.attempt}


@handler(
    "test.defaults",
    max_attempts=4,
    on_lease_expired="retry",
    retry_backoff_s=0.2,
    retry_backoff_max_s=0.4,
    budget={"max_steps": 7},
)
async def with_defaults(ctx: RunContext, params: FlakyInput) -> dict[str, int]:
    """test.flaky with handler defaults: 4 attempts, retry on lease expiry, 7 steps, 0.2 s."""
    return await flaky(ctx, params)


def fail_flag_key(prefix: str, tag: str) -> str:
    """While this key exists, ``test.charge_then_fail`` fails after its charge."""
    return f"{prefix}:test:fail:{tag}"


def tag_calls_key(prefix: str, tag: str) -> str:
    """The idempotency keys ``test.charge_then_fail``'s side effect was really called with."""
    return f"{prefix}:test:effect-calls-by-tag:{tag}"


class ChargeThenFailInput(BaseModel):
    """Which side channel the run reports through (shared by a run and its re-runs)."""

    tag: str


@handler("test.charge_then_fail")
async def charge_then_fail(ctx: RunContext, params: ChargeThenFailInput) -> dict[str, Any]:
    """Charge once through ``ctx.effect``; then fail while the test's fail flag is set.

    The test clears the flag before it re-runs the failed run: the re-run gets past
    the failure, and the calls list shows whether the charge was really made again.
    """
    prefix, url = os.environ["LEASEHOLD_PREFIX"], os.environ["LEASEHOLD_REDIS_URL"]

    async def call_payment_api(key: str) -> dict[str, Any]:
        await _append(lambda p, _run: tag_calls_key(p, params.tag), ctx.run_id, key)
        return {"charged_by_run": ctx.run_id, "key": key}

    receipt = await ctx.effect("charge", call_payment_api)
    client = async_client(url)
    try:
        failing = await client.exists(fail_flag_key(prefix, params.tag))
    finally:
        await client.aclose()
    if failing:
        raise RunFailure("the order service refused the order after the charge", code="refused")
    return {"receipt": receipt, "run_id": ctx.run_id}
