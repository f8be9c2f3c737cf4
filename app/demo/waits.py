"""Demo handlers that wait without holding a worker (durable sleep, signals, questions).

* ``demo.nap``    sleeps durably: the run parks ``waiting`` (no lease, no slot) and
  wakes on whichever worker is alive when its time comes; ``kill -9`` the worker
  that parked it and the run still finishes on time.
* ``demo.review`` waits for a ``review`` signal (``POST /runs/{id}/signals/review``),
  and if none comes within ``timeout_s`` asks a person (``waiting_human``; answered
  by ``POST /runs/{id}/resume``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.executor import RunContext, SignalTimeout, handler


class NapInput(BaseModel):
    """How long to sleep durably."""

    seconds: float = Field(default=5.0, ge=0, le=86_400)


class ReviewInput(BaseModel):
    """What to review, and how long to wait for the ``review`` signal before asking a person."""

    subject: str = Field(default="draft #1", max_length=200)
    timeout_s: float = Field(default=60.0, ge=0, le=86_400)


@handler("demo.nap")
async def nap(ctx: RunContext, params: NapInput) -> dict[str, Any]:
    """Checkpoint the time it first ran, sleep durably, and report who woke it."""
    if not ctx.state:
        await ctx.checkpoint({"parked_by": ctx.owner_id})
    await ctx.sleep(params.seconds)
    return {"slept_s": params.seconds, "parked_by": ctx.state["parked_by"], "woke_on": ctx.owner_id}


@handler("demo.review")
async def review(ctx: RunContext, params: ReviewInput) -> dict[str, Any]:
    """Take a reviewer's signal, or after ``timeout_s`` a person's answer to the question."""
    try:
        decision = await ctx.wait_for_signal("review", timeout_s=params.timeout_s)
        return {"subject": params.subject, "decision": decision, "by": "signal"}
    except SignalTimeout:
        answer = await ctx.ask_human({"question": f"nobody reviewed {params.subject}: approve?"})
        return {"subject": params.subject, "decision": answer, "by": "person"}
