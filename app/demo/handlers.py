"""Small handlers that show what the executor does with different kinds of work.

* ``demo.echo``  returns its input: the cheapest possible run (benchmarks).
* ``demo.sleep`` waits, emitting progress: a long run to kill a worker under.
* ``demo.cpu``   holds the event loop with CPU work: slow is not dead (10 s at most).
* ``demo.fail``  raises, retryable or not: the retry policy and error records.
* ``demo.approval`` waits, silent, on a person: with an evaluator that answers
  ESCALATE (``app.demo.judge``) the run parks in ``waiting_human`` until resumed.
* ``demo.charge`` calls a slow fake payment provider through ``ctx.effect``: a
  worker killed during the call leaves the run in ``reconciliation_required``.
* ``demo.order`` charges through ``ctx.effect``, then ships: while the fake shipping
  service is down the run fails *after* the charge, and a re-run
  (``POST /runs/{id}/retry``) ships it without charging again.
* ``demo.quota`` makes calls under ``ctx.rate_limit``: several runs share a declared
  key's bucket, and each wait is a ``wait`` event (``kind: rate_limited``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.demo.limits import MAX_CPU_S
from app.executor import RunContext, RunFailure, handler

# the operation subject demo.approval waits on, which app.demo.judge escalates
APPROVAL_SUBJECT = "approval"


class EchoInput(BaseModel):
    """Anything: echoed back as the output."""

    model_config = ConfigDict(extra="allow")

    message: str | None = None


class SleepInput(BaseModel):
    """How long to sleep, and how often to report progress.

    Progress is sparse by default (every 10 s): a long sleep is the demo's run to kill a
    worker under, and one event a second drowned its stream. At least 0.1 s apart, so an
    input cannot turn the run into a flood of events.
    """

    seconds: float = Field(default=1.0, ge=0, le=86_400)
    progress_every_s: float = Field(default=10.0, ge=0.1, le=86_400)


class CpuInput(BaseModel):
    """How long to hold the event loop (and the GIL) with pure-Python work."""

    seconds: float = Field(default=1.0, ge=0, le=MAX_CPU_S)


class FailInput(BaseModel):
    """The error to raise, and whether a retry may help."""

    message: str = "demo failure"
    retryable: bool = False


class ApprovalInput(BaseModel):
    """The lease of the wait for a person, and how long to wait at most without a verdict."""

    lease_s: float = Field(default=1.0, gt=0, le=3_600)
    wait_s: float = Field(default=3_600.0, ge=0, le=86_400)


class ChargeInput(BaseModel):
    """What to charge, and how long the fake payment provider takes to answer."""

    amount: float = Field(default=42.0, gt=0, le=1_000_000)
    provider_s: float = Field(default=1.0, ge=0, le=86_400)


class OrderInput(BaseModel):
    """What to charge, and until when (epoch seconds) the shipping service is down."""

    amount: float = Field(default=42.0, gt=0, le=1_000_000)
    shipping_down_until: float = Field(default=0.0, ge=0, le=1e11)


class QuotaInput(BaseModel):
    """How many calls to make on a declared rate-limit key (PUT /rate-limits/{key})."""

    key: str = Field(default="demo.model", max_length=300)
    calls: int = Field(default=5, ge=0, le=1000)


@handler("demo.quota")
async def quota(ctx: RunContext, params: QuotaInput) -> dict[str, Any]:
    """Make ``calls`` calls, each under one token of ``key``, shared by every worker."""
    started = time.monotonic()
    for call in range(1, params.calls + 1):
        async with ctx.rate_limit(params.key):
            await ctx.progress(call=call, at_s=round(time.monotonic() - started, 3))
    return {"calls": params.calls, "took_s": round(time.monotonic() - started, 3)}


@handler("demo.echo")
async def echo(ctx: RunContext, params: EchoInput) -> dict[str, Any]:
    """Return the input unchanged."""
    return params.model_dump(exclude_none=True)


# uvloop's timers count whole milliseconds: a sleep can end up to ~1 ms before
# time.monotonic() says it should, and a remainder that small is not another step (it
# was: a 3 s sleep sometimes reported progress twice, the second after 0.5 ms)
TIMER_RESOLUTION_S = 0.001


@handler("demo.sleep")
async def sleep(ctx: RunContext, params: SleepInput) -> dict[str, Any]:
    """Sleep for ``seconds``, emitting a progress event every ``progress_every_s`` (10 s)."""
    started = time.monotonic()
    remaining = params.seconds
    while remaining > TIMER_RESOLUTION_S:
        step = min(params.progress_every_s, remaining)
        await asyncio.sleep(step)
        remaining = params.seconds - (time.monotonic() - started)
        await ctx.progress(elapsed_s=round(time.monotonic() - started, 3))
    return {"slept_s": round(time.monotonic() - started, 3)}


@handler("demo.cpu")
async def cpu(ctx: RunContext, params: CpuInput) -> dict[str, Any]:
    """Spin on the event loop without yielding, to prove a blocked loop keeps its lease."""
    started = time.monotonic()
    iterations = 0
    while time.monotonic() - started < params.seconds:
        iterations += 1
    return {"iterations": iterations, "held_loop_s": round(time.monotonic() - started, 3)}


@handler("demo.fail")
async def fail(ctx: RunContext, params: FailInput) -> None:
    """Raise a typed failure with the given message and retryability."""
    raise RunFailure(params.message, code="demo_failure", retryable=params.retryable)


@handler("demo.approval")
async def approval(ctx: RunContext, params: ApprovalInput) -> dict[str, Any]:
    """Wait for a person's approval in a silent operation; resumed, return their answer.

    Nothing reports progress while it waits, so when its lease runs out the watchdog
    is asked; an evaluator that answers ESCALATE (``app.demo.judge:escalate_approvals``)
    parks the run in ``waiting_human``, and ``POST /runs/{id}/resume`` brings the
    person's input back as ``ctx.resume_input``.
    """
    if ctx.resume_input is not None:
        return {"approved": True, "decision": ctx.resume_input, "attempt": ctx.attempt}
    async with ctx.operation("tool_call", APPROVAL_SUBJECT, lease_s=params.lease_s):
        await asyncio.sleep(params.wait_s)
    return {"approved": False, "decision": None, "attempt": ctx.attempt}


@handler("demo.charge")
async def charge(ctx: RunContext, params: ChargeInput) -> dict[str, Any]:
    """Charge once per run through ``ctx.effect``, however often the run is executed.

    The fake provider answers after ``provider_s``. A worker killed while it waits
    leaves an effect started without a result: nobody knows whether the money moved,
    so the run parks in ``reconciliation_required`` until a person resolves it.
    """

    async def call_provider(key: str) -> dict[str, Any]:
        await asyncio.sleep(params.provider_s)
        return {"charge_id": f"ch-{key}", "amount": params.amount, "idempotency_key": key}

    receipt = await ctx.effect("charge", call_provider)
    return {"receipt": receipt}


@handler("demo.order")
async def order(ctx: RunContext, params: OrderInput) -> dict[str, Any]:
    """Charge once through ``ctx.effect``, then ship; fail while shipping is down.

    The failure comes after the charge was recorded: a re-run of the failed run
    (``leasehold runs retry ID``) replays the recorded charge under the same key
    and ships, so the customer is charged once.
    """

    async def call_provider(key: str) -> dict[str, Any]:
        return {"charge_id": f"ch-{key}", "amount": params.amount, "idempotency_key": key}

    receipt = await ctx.effect("charge", call_provider)
    if time.time() < params.shipping_down_until:
        raise RunFailure("the shipping service is down", code="shipping_unavailable")
    return {"receipt": receipt, "shipped_by": ctx.run_id}
