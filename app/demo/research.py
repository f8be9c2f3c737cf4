"""``demo.research``: a run that starts runs — fan out to three sources, fan in, summarise.

The parent spawns one ``demo.research_source`` child per source, with different
durations; one of them calls a tool that hangs. That tool runs inside a
supervised operation with a time-to-first-progress budget, so the budget ends it
(``first_progress_timeout``, a typed failure of that child alone) instead of a
timeout killing the whole tree. The parent waits for all three with
``ctx.join(mode="settled")`` — parked, holding no worker — and returns what the
sources found and which failed, and why.

Follow it as one stream: ``leasehold runs watch <id> --tree``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from app.executor import RunContext, handler

MAX_SOURCE_S = 60.0


class Source(BaseModel):
    """One source to research: how long its tool works, or whether the tool hangs."""

    name: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    seconds: float = Field(default=1.0, ge=0, le=MAX_SOURCE_S)
    hangs: bool = False


DEFAULT_SOURCES = [
    Source(name="papers", seconds=0.6),
    Source(name="forums", seconds=1.8),
    Source(name="archive", seconds=1.0, hangs=True),
]


class ResearchInput(BaseModel):
    """The topic, its sources (three by default, one whose tool hangs), the tool's budget."""

    topic: str = Field(default="leases", max_length=200)
    sources: list[Source] = Field(default_factory=lambda: list(DEFAULT_SOURCES), max_length=10)
    first_progress_s: float = Field(default=1.5, gt=0, le=MAX_SOURCE_S)


class SourceInput(BaseModel):
    """What one child researches, and the budget its tool gets to show a first sign of life."""

    topic: str = Field(max_length=200)
    source: Source
    first_progress_s: float = Field(default=1.5, gt=0, le=MAX_SOURCE_S)


@handler("demo.research")
async def research(ctx: RunContext, params: ResearchInput) -> dict[str, Any]:
    """Spawn a child per source, join them all (settled), and summarise what came back."""
    children = [
        await ctx.spawn(
            "demo.research_source",
            {
                "topic": params.topic,
                "source": source.model_dump(),
                "first_progress_s": params.first_progress_s,
            },
        )
        for source in params.sources
    ]
    outcomes = await ctx.join(children, mode="settled")
    found = [o.output for o in outcomes if o.succeeded]
    failed = [
        {"child": o.child_id, "status": o.status, "code": (o.error or {}).get("code")}
        for o in outcomes
        if not o.succeeded
    ]
    return {
        "topic": params.topic,
        "summary": f"{len(found)} of {len(outcomes)} sources answered on {params.topic}",
        "found": found,
        "failed": failed,
    }


@handler("demo.research_source")
async def research_source(ctx: RunContext, params: SourceInput) -> dict[str, Any]:
    """Call the source's tool in a supervised operation; a hung tool meets its budget."""
    source = params.source
    async with ctx.operation(
        "tool_call",
        f"search:{source.name}",
        lease_s=max(10.0, 2 * params.first_progress_s),  # the budget decides, not the lease
        first_progress_s=params.first_progress_s,
    ) as op:
        if source.hangs:
            await asyncio.Event().wait()  # a tool that never answers: the budget ends it
        remaining = source.seconds
        while remaining > 0:
            step = min(0.2, remaining)
            await asyncio.sleep(step)
            remaining -= step
            op.progress(source=source.name, left_s=round(remaining, 2))
    return {"source": source.name, "note": f"{source.name} on {params.topic}"}
