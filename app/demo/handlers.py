"""Small handlers that show what the executor does with different kinds of work.

* ``demo.echo``  returns its input: the cheapest possible run (benchmarks).
* ``demo.sleep`` waits, emitting progress: a long run to kill a worker under.
* ``demo.cpu``   holds the event loop with CPU work: slow is not dead.
* ``demo.fail``  raises, retryable or not: the retry policy and error records.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.executor import RunContext, RunFailure, handler


class EchoInput(BaseModel):
    """Anything: echoed back as the output."""

    model_config = ConfigDict(extra="allow")

    message: str | None = None


class SleepInput(BaseModel):
    """How long to sleep, and how often to report progress."""

    seconds: float = Field(default=1.0, ge=0, le=86_400)
    progress_every_s: float = Field(default=1.0, gt=0)


class CpuInput(BaseModel):
    """How long to hold the event loop (and the GIL) with pure-Python work."""

    seconds: float = Field(default=1.0, ge=0, le=3_600)


class FailInput(BaseModel):
    """The error to raise, and whether a retry may help."""

    message: str = "demo failure"
    retryable: bool = False


@handler("demo.echo")
async def echo(ctx: RunContext, params: EchoInput) -> dict[str, Any]:
    """Return the input unchanged."""
    return params.model_dump(exclude_none=True)


@handler("demo.sleep")
async def sleep(ctx: RunContext, params: SleepInput) -> dict[str, Any]:
    """Sleep for ``seconds``, emitting a progress event every ``progress_every_s``."""
    started = time.monotonic()
    remaining = params.seconds
    while remaining > 0:
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
