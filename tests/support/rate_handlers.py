"""Handlers the rate-limit tests run in real workers.

They record, in a side channel the test owns (a Redis list per key), each call's
grant (the epoch ms the bucket counted it at, ``Grant.until_ms``) and the Redis
server's time at which the call then ran, so a test can check the bound on the
grants and that no call ran before its token was due, across workers by one clock.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from app.executor import RunContext, handler
from app.store.redis.connection import AsyncRedis, async_client


def calls_key(prefix: str, key: str) -> str:
    """Where ``test.rate_call`` records each call: ``"<call µs> <grant ms>"`` (Redis clock).

    The grant is ``-`` for a call inside an operation (it does not expose its grant).
    """
    return f"{prefix}:test:rate-calls:{key}"


def pushed_key(prefix: str, run_id: str) -> str:
    """Set once ``test.rate_429`` reported its 429, so a later attempt does not again."""
    return f"{prefix}:test:rate-pushed:{run_id}"


class CallsInput(BaseModel):
    """``calls`` calls of ``cost`` tokens on ``key``, inside an operation if asked."""

    key: str = "openai"
    calls: int = Field(default=1, ge=0, le=1000)
    cost: int = Field(default=1, ge=0)
    first_progress_s: float | None = Field(default=None, gt=0)


@handler("test.rate_call")
async def rate_call(ctx: RunContext, params: CallsInput) -> dict[str, object]:
    """Take a token per call and record when it was granted (by the Redis clock)."""
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        for _ in range(params.calls):
            if params.first_progress_s is None:
                async with ctx.rate_limit(params.key, params.cost) as grant:
                    await _record(client, params.key, grant.until_ms)
            else:
                operation = ctx.operation(
                    "model_call",
                    params.key,
                    first_progress_s=params.first_progress_s,
                    rate_limit=params.key,
                    rate_cost=params.cost,
                )
                async with operation as op:
                    await _record(client, params.key, None)
                    op.progress()
    finally:
        await client.aclose()
    return {"owner": ctx.owner_id, "attempt": ctx.attempt}


async def _record(client: AsyncRedis, key: str, until_ms: int | None) -> None:
    seconds, micros = await client.time()
    grant = "-" if until_ms is None else str(until_ms)
    await client.rpush(
        calls_key(os.environ["LEASEHOLD_PREFIX"], key), f"{seconds * 1_000_000 + micros} {grant}"
    )


class Report429Input(BaseModel):
    """Report one upstream 429 on ``key`` (first execution only), then make one call."""

    key: str = "openai"
    retry_after_s: float = 1.0
    release: bool = True


@handler("test.rate_429")
async def rate_429(ctx: RunContext, params: Report429Input) -> dict[str, object]:
    """The first execution reports a 429 (released, unless told not to); a later one calls."""
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        first = await client.set(pushed_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id), 1, nx=True)
        until_ms = None
        if first:
            until_ms = await ctx.rate_limited(
                params.key, retry_after_s=params.retry_after_s, release=params.release
            )
        async with ctx.rate_limit(params.key) as grant:
            await _record(client, params.key, grant.until_ms)
    finally:
        await client.aclose()
    return {"attempt": ctx.attempt, "fence": ctx.fence, "until_ms": until_ms}
