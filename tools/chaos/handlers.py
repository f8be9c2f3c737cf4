"""Handlers the chaos cluster's workers register (LEASEHOLD_HANDLERS=...,tools.chaos.handlers).

Side effects are counted outside Leasehold, in files the harness owns: every
real execution of an effect function appends one line to
``$CHAOS_SIDE_DIR/<run id>.effects``. Files survive every fault the harness
injects into Redis, and an append of one short line is atomic, so the count is
the truth the checker compares Leasehold's promise ("a non-idempotent effect
runs at most once per run") against.

Every handler returns its owner and fence, so the checker can tell whose
outcome the run record kept, and notes what it returns in
``$CHAOS_SIDE_DIR/<run id>.returns`` just before returning it: an outcome a
handler produced must be the run's output, or the run must have been taken
from that owner (nothing a handler returned is lost silently).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from app.executor import RunContext, handler
from tools.chaos.rates import QUOTA_KEY, grants_file

SIDE_DIR_ENV = "CHAOS_SIDE_DIR"
ESCALATION_SUBJECT = "pager"


def effects_file(side_dir: Path, run_id: str) -> Path:
    """Where the real executions of one run's effects are counted."""
    return side_dir / f"{run_id}.effects"


def read_executions(side_dir: Path, run_id: str) -> list[dict[str, str]]:
    """Every recorded real execution of a run's effects, oldest first."""
    rows = []
    for line in _lines(effects_file(side_dir, run_id)):
        key, owner, fence, idempotent = line.split(" ")[:4]
        rows.append({"key": key, "owner": owner, "fence": fence, "idempotent": idempotent})
    return rows


def ticks_file(side_dir: Path, run_id: str) -> Path:
    """Where a run's handler notes each step it took: who, at which fence, when."""
    return side_dir / f"{run_id}.ticks"


def read_ticks(side_dir: Path, run_id: str) -> list[tuple[str, int, float]]:
    """(owner, fence, epoch seconds) of every step a run's handlers took."""
    rows = (line.split(" ") for line in _lines(ticks_file(side_dir, run_id)))
    return [(owner, int(fence), float(at)) for owner, fence, at in rows]


def returns_file(side_dir: Path, run_id: str) -> Path:
    """Where a run's handlers note every output they returned: who, at which fence, what."""
    return side_dir / f"{run_id}.returns"


def read_returns(side_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """``{"owner", "fence", "at", "output"}`` of every return of a run's handlers, oldest first.

    ``at`` is epoch seconds, so the harness can tell returns made under a fault.
    """
    return [json.loads(line) for line in _lines(returns_file(side_dir, run_id))]


def _lines(path: Path) -> list[str]:
    """A side-channel file's lines; none when nothing was ever noted there."""
    return path.read_text().splitlines() if path.exists() else []


def _returning(ctx: RunContext, output: dict[str, Any]) -> dict[str, Any]:
    """Note ``output`` in the side channel, then hand it back for the handler to return."""
    side_dir = Path(os.environ[SIDE_DIR_ENV])
    noted = {"owner": ctx.owner_id, "fence": ctx.fence, "at": time.time(), "output": output}
    line = json.dumps(noted)
    _append(returns_file(side_dir, ctx.run_id), line + "\n")
    return output


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())  # one write of one short line: atomic with O_APPEND
    finally:
        os.close(fd)


def _record_execution(ctx: RunContext, key: str, idempotent: bool) -> None:
    side_dir = Path(os.environ[SIDE_DIR_ENV])
    line = f"{key} {ctx.owner_id} {ctx.fence} {int(idempotent)} {time.time():.3f}\n"
    _append(effects_file(side_dir, ctx.run_id), line)


def _record_tick(ctx: RunContext) -> None:
    side_dir = Path(os.environ[SIDE_DIR_ENV])
    _append(ticks_file(side_dir, ctx.run_id), f"{ctx.owner_id} {ctx.fence} {time.time():.3f}\n")


def _identity(ctx: RunContext) -> dict[str, Any]:
    return {"owner": ctx.owner_id, "fence": ctx.fence, "attempt": ctx.attempt}


class TickInput(BaseModel):
    """How long to run, and how often to emit a progress event."""

    seconds: float = Field(default=0.2, ge=0)
    every_s: float = Field(default=0.25, gt=0)


@handler("chaos.tick")
async def tick(ctx: RunContext, params: TickInput) -> dict[str, Any]:
    """Sleep ``seconds`` in steps, emitting a numbered progress event after each."""
    started = time.monotonic()
    step = 0
    while (left := params.seconds - (time.monotonic() - started)) > 0:
        await asyncio.sleep(min(params.every_s, left))
        _record_tick(ctx)
        step += 1
        await ctx.progress(step=step)
    return _returning(ctx, _identity(ctx))


class NapInput(BaseModel):
    """How long to sleep durably (parked, holding nothing) between two ticks."""

    seconds: float = Field(default=0.5, ge=0)


@handler("chaos.nap")
async def nap(ctx: RunContext, params: NapInput) -> dict[str, Any]:
    """Tick, park in ``ctx.sleep`` (no lease, no slot), and finish on whoever woke it."""
    _record_tick(ctx)
    await ctx.sleep(params.seconds)
    _record_tick(ctx)
    return _returning(ctx, _identity(ctx))


class OrderInput(BaseModel):
    """An order: a non-idempotent charge, checkpoints, an idempotent notification.

    ``charge_s`` is how long the charge's side effect takes (a fault may land inside
    it); ``sync_charge`` runs it in a thread, which no cancellation can stop.
    """

    charge_s: float = Field(default=0.3, ge=0)
    sync_charge: bool = False
    steps: int = Field(default=3, ge=1)
    step_s: float = Field(default=0.3, ge=0)


@handler("chaos.order")
async def order(ctx: RunContext, params: OrderInput) -> dict[str, Any]:
    """Charge once, checkpoint after every step, notify (idempotently), return the receipt."""
    state = ctx.state or {"step": 0}
    if state["step"] == 0:
        receipt = await ctx.effect("charge", _charge(ctx, params))
        state = {"step": 1, "receipt": receipt}
        await ctx.checkpoint(state)
    for step in range(state["step"] + 1, params.steps + 1):
        await asyncio.sleep(params.step_s)
        _record_tick(ctx)
        state = {**state, "step": step}
        await ctx.checkpoint(state)
    await ctx.effect("notify", _notify(ctx), idempotent=True)
    return _returning(ctx, {**_identity(ctx), "receipt": state["receipt"]})


def _charge(ctx: RunContext, params: OrderInput) -> Any:
    async def charge(key: str) -> dict[str, Any]:
        _record_execution(ctx, key, idempotent=False)
        await asyncio.sleep(params.charge_s)
        return {"key": key, "charged_at_fence": ctx.fence}

    def charge_blocking(key: str) -> dict[str, Any]:
        _record_execution(ctx, key, idempotent=False)
        time.sleep(params.charge_s)
        return {"key": key, "charged_at_fence": ctx.fence}

    return charge_blocking if params.sync_charge else charge


def _notify(ctx: RunContext) -> Any:
    async def notify(key: str) -> str:
        _record_execution(ctx, key, idempotent=True)
        await asyncio.sleep(0.05)
        return key

    return notify


class QuotaInput(BaseModel):
    """How many calls to make on the chaos quota key (tools/chaos/rates.py)."""

    calls: int = Field(default=1, ge=1, le=10)


@handler("chaos.quota")
async def quota(ctx: RunContext, params: QuotaInput) -> dict[str, Any]:
    """Take a token of the quota key per call; write each grant's time down outside Redis."""
    side_dir = Path(os.environ[SIDE_DIR_ENV])
    for _ in range(params.calls):
        async with ctx.rate_limit(QUOTA_KEY) as grant:
            _append(grants_file(side_dir, ctx.run_id), f"{grant.until_ms}\n")
    return _returning(ctx, _identity(ctx))


class EscalateInput(BaseModel):
    """The lease of the operation the watchdog escalates."""

    lease_s: float = Field(default=0.3, gt=0)


@handler("chaos.escalate")
async def escalate(ctx: RunContext, params: EscalateInput) -> dict[str, Any]:
    """Hang in a supervised operation until the watchdog escalates; finish once resumed."""
    if ctx.resume_input is not None:
        return _returning(ctx, {**_identity(ctx), "resumed_with": ctx.resume_input})
    async with ctx.operation("tool_call", ESCALATION_SUBJECT, lease_s=params.lease_s):
        await asyncio.Event().wait()
    return _identity(ctx)


def judge(evidence: dict[str, Any]) -> dict[str, str]:
    """The chaos workers' watchdog evaluator: the pager operation always needs a person."""
    if evidence.get("subject") == ESCALATION_SUBJECT:
        return {"verdict": "ESCALATE", "reason": "the pager needs a person"}
    return {"verdict": "RENEW", "reason": "not the pager"}


class FamilyInput(BaseModel):
    """How many children to spawn (``chaos.tick`` each), for how long, and how to join them."""

    children: int = Field(default=2, ge=1, le=5)
    child_s: float = Field(default=0.5, ge=0)
    mode: str = "settled"


@handler("chaos.family")
async def family(ctx: RunContext, params: FamilyInput) -> dict[str, Any]:
    """Spawn children and join them (parked, no lease); return what each child's end was.

    The checker holds it to exactly one child per spawn step (counted by parent_id), and
    a succeeded parent to having seen every child's own terminal status.
    """
    _record_tick(ctx)
    kids = [
        await ctx.spawn("chaos.tick", {"seconds": params.child_s, "every_s": 0.1})
        for _ in range(params.children)
    ]
    outcomes = await ctx.join(kids, mode="settled")
    _record_tick(ctx)
    seen = [{"id": o.child_id, "status": o.status} for o in outcomes]
    return _returning(ctx, {**_identity(ctx), "children": seen})
