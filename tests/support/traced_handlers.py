"""A handler for the tracing test (LEASEHOLD_HANDLERS=...,tests.support.traced_handlers).

Each attempt supervises one short operation (with a lease short enough that the
watchdog is consulted: ``wait`` and ``verdict`` span events), records one effect
and logs a line; the first claim then hangs, so a test can ``kill -9`` (or drain)
its worker and watch another worker take the run over.
The first claim is fence 1; any later claim (after a release or a requeue) is not.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import BaseModel, Field

from app.executor import RunContext, handler

log = logging.getLogger(__name__)


class TracedInput(BaseModel):
    """How long the first claim hangs after its work (long enough to be killed)."""

    hang_s: float = Field(default=60.0, ge=0, le=600)


@handler("test.traced")
async def traced(ctx: RunContext, params: TracedInput) -> dict[str, int]:
    """One operation and one effect per attempt; the first claim then hangs."""
    log.info("traced attempt %d", ctx.attempt)
    async with ctx.operation("tool", "lookup", lease_s=0.1) as op:
        for _ in range(4):
            await asyncio.sleep(0.05)
            op.progress()
    charged = await ctx.effect("charge", lambda key: {"key": key}, idempotent=True)
    if ctx.fence == 1:  # the first claim (a release or a takeover claims at a later fence)
        await asyncio.sleep(params.hang_s)
    return {"attempt": ctx.attempt, "charged": len(charged["key"])}
