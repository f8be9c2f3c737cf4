"""Handlers only the tests register (LEASEHOLD_HANDLERS=app.demo,tests.support.handlers).

They count their executions in Redis, a side channel the test owns, so a test
can assert how many times a run really executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from pydantic import BaseModel, Field

from app.executor import EventTooLarge, RunContext, RunFailure, handler
from app.store.redis.connection import async_client


class RecordInput(BaseModel):
    """How long to run after recording the execution."""

    seconds: float = Field(default=0.0, ge=0)
    tag: str = "default"


def executions_key(prefix: str, run_id: str) -> str:
    """Where ``test.record`` counts executions of one run."""
    return f"{prefix}:test:executions:{run_id}"


@handler("test.record")
async def record(ctx: RunContext, params: RecordInput) -> dict[str, object]:
    """Count this execution in Redis, then sleep ``seconds``."""
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        count = await client.incr(executions_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id))
    finally:
        await client.aclose()
    await asyncio.sleep(params.seconds)
    return {"execution": count, "fence": ctx.fence, "owner": ctx.owner_id}


class TokensInput(BaseModel):
    """How many token events to emit, and how fast."""

    count: int = Field(default=100, ge=0)
    gap_s: float = Field(default=0.0, ge=0)


@handler("test.tokens")
async def tokens(ctx: RunContext, params: TokensInput) -> dict[str, int]:
    """Emit ``count`` numbered token events, as a streaming model would."""
    for index in range(params.count):
        await ctx.emit("token", {"i": index, "text": f"t{index} "})
        if params.gap_s:
            await asyncio.sleep(params.gap_s)
    return {"emitted": params.count}


class OversizedInput(BaseModel):
    """Size of the event payload to try."""

    size: int = 1_000_000


@handler("test.oversized")
async def oversized(ctx: RunContext, params: OversizedInput) -> dict[str, str]:
    """Try to emit an event over the size bound; report the error the handler got."""
    try:
        await ctx.emit("blob", {"data": "x" * params.size})
    except EventTooLarge as exc:
        await ctx.emit("note", {"after": "refused"})
        return {"refused": str(exc)}
    return {"refused": ""}


@handler("test.escalating")
async def escalating(ctx: RunContext, params: RecordInput) -> dict[str, object]:
    """Hang in a supervised operation until a person resumes the run with an input."""
    if ctx.resume_input is not None:
        return {"resumed_with": ctx.resume_input, "attempt": ctx.attempt, "fence": ctx.fence}
    async with ctx.operation("tool_call", "pager", lease_s=0.2):
        await asyncio.Event().wait()
    return {"resumed_with": None}


@handler("test.fails_on_cancel")
async def fails_on_cancel(ctx: RunContext, params: RecordInput) -> dict[str, object]:
    """Wait; when the cancel arrives, fail with a retryable error instead of stopping.

    The race a cancel must survive: the handler's failure reaches ``finish_runs``
    while the run is ``cancelling``, with attempts left.
    """
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        raise RunFailure("flaky dependency", code="flaky", retryable=True) from None
    return {}


class HoldInput(BaseModel):
    """How big an output to return once the test lets the run finish."""

    output_bytes: int = Field(default=1_000, ge=0, le=1_000_000)
    tag: str = "held"


def hold_key(prefix: str) -> str:
    """While this key exists, ``test.hold`` runs keep running; DEL (allowed at OOM) ends them."""
    return f"{prefix}:test:hold"


def hold_output(params: HoldInput) -> dict[str, str]:
    """What a ``test.hold`` run returns: the test computes the same to compare."""
    return {"tag": params.tag, "blob": (params.tag * params.output_bytes)[: params.output_bytes]}


@handler("test.hold")
async def hold(ctx: RunContext, params: HoldInput) -> dict[str, str]:
    """Emit progress until the test deletes the hold key, then return a large output."""
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        while await client.exists(hold_key(os.environ["LEASEHOLD_PREFIX"])):
            await ctx.progress(waiting=True)
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    return hold_output(params)


class GatedInput(BaseModel):
    """Where the gate is, how long to keep calling through it, how often."""

    gate_url: str
    seconds: float = Field(default=30.0, ge=0)
    every_s: float = Field(default=0.1, gt=0)


def gate_calls_key(prefix: str, run_id: str) -> str:
    """Where ``test.gated_calls`` records each call: "<epoch s> <owner> <fence> <status>"."""
    return f"{prefix}:test:gate:{run_id}"


@handler("test.gated_calls")
def gated_calls(ctx: RunContext, params: GatedInput) -> dict[str, object]:
    """Call a tool through ``leasehold gate`` every ``every_s`` with a lease token.

    A sync handler that ignores ``ctx.cancelled`` on purpose: a zombie whose outside calls
    nothing inside the worker can stop. When its lease is lost it keeps its last token.
    """
    import time

    import httpx
    import redis

    from app.errors import LeaseLost

    record = redis.Redis.from_url(os.environ["LEASEHOLD_REDIS_URL"])
    key = gate_calls_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id)
    token = ""
    deadline = time.monotonic() + params.seconds
    with httpx.Client(timeout=5.0) as http, record:
        while time.monotonic() < deadline:
            # once its lease is lost the zombie keeps its last token: the gate must refuse it
            with contextlib.suppress(LeaseLost):
                token = ctx.lease_token_sync(audience="tools")
            try:
                status = http.post(
                    params.gate_url, headers={"Authorization": f"Bearer {token}"}, json={}
                ).status_code
            except httpx.HTTPError:
                status = 0
            record.rpush(key, f"{time.time():.3f} {ctx.owner_id} {ctx.fence} {status}")
            time.sleep(params.every_s)
    return {"fence": ctx.fence}


class ClaimsInput(BaseModel):
    """What audience the lease token is for."""

    audience: str = "tools"


@handler("test.lease_claims")
async def lease_claims(ctx: RunContext, params: ClaimsInput) -> dict[str, object]:
    """The claims of this run's lease token (its signature is the verifier's business)."""
    import jwt

    token = await ctx.lease_token(audience=params.audience)
    claims: dict[str, object] = jwt.decode(token, options={"verify_signature": False})
    return claims
