"""Handlers only the tests register (LEASEHOLD_HANDLERS=app.demo,tests.support.handlers).

They count their executions in Redis, a side channel the test owns, so a test
can assert how many times a run really executed.
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis
from pydantic import BaseModel, Field

from app.executor import RunContext, handler


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
    client = aioredis.Redis.from_url(os.environ["LEASEHOLD_REDIS_URL"])
    try:
        count = await client.incr(executions_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id))
    finally:
        await client.aclose()
    await asyncio.sleep(params.seconds)
    return {"execution": count, "fence": ctx.fence, "owner": ctx.owner_id}
