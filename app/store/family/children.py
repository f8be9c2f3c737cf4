"""Runs that start runs, the write side: a parent spawns children (``spawn_child``).

A parent's family lives in the parent's slot, a child's record in its own queue's
slot (Redis Cluster: the two may be on different nodes), so no script touches both:

* ``spawn_child`` (parent's slot, fenced on the parent's lease) records which child a
  spawn step names (``family:<parent>`` ``spawn:<n>`` -> child id) and puts the child
  in the parent's children index (``children:<parent>``, child id -> spawn ms) before
  the child exists. A replay of the step answers the same id.
* ``create_run`` (child's slot) then creates the child with that id, its
  ``parent_id``, ``root_id`` and ``depth``. A create of an id that exists creates
  nothing, so a parent taken over between the two steps gets the same child, never
  a second one; a child the parent's end cancelled before it existed is refused
  (its tombstone).

``join_children`` (parent's slot, fenced) checks a join's condition against the
outcomes delivered to the parent's family (``out:<child>``) and parks the parent in
the same step when it does not hold, as ``park_run`` parks a wait; the outbox
(:mod:`app.store.outbox.store`) delivers each child's end there and wakes it.

Reads of the family (``GET /runs/{id}/children``, the tree stream) are not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.errors import InvalidTransition, LeaseLost
from app.models import RunStatus
from app.store.codec import new_run_id
from app.store.context import Store, StoreContext
from app.store.family.bindings import (
    JOIN_CHILDREN,
    SPAWN_CHILD,
    JoinArgs,
    SpawnArgs,
    SpawnReply,
)
from app.store.leases.store import Lease
from app.store.lua.scripts import ScriptCode
from app.store.outbox.bindings import ChildIdGroup
from app.store.runs.bindings import CREATE_RUN
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore


class OnParentEnd(StrEnum):
    """What a parent's end (other than a cancel) does to a child still live."""

    CANCEL = "cancel"
    DETACH = "detach"


class SpawnAnswer(StrEnum):
    """What ``spawn_child`` answered for a step."""

    NEW = "new"  # recorded now: create the child
    REPLAYED = "replayed"  # recorded before: the same child (create again: a no-op)
    FULL = "full"  # the parent has max_children children already
    TOO_DEEP = "too_deep"  # the child would sit deeper than max_depth
    CANCELLING = "cancelling"  # the parent is being cancelled: no new child


_ANSWERS = {
    ScriptCode.OK: SpawnAnswer.NEW,
    ScriptCode.REPLAYED: SpawnAnswer.REPLAYED,
    ScriptCode.FULL: SpawnAnswer.FULL,
    ScriptCode.LIMITED: SpawnAnswer.TOO_DEEP,
    ScriptCode.CANCEL: SpawnAnswer.CANCELLING,
}


class JoinMode(StrEnum):
    """When a join is over: every child succeeded (or one did not), the first success, all ended."""

    ALL = "all"
    ANY = "any"
    SETTLED = "settled"


class JoinOutcome(StrEnum):
    """What ``join_children`` answered."""

    OVER = "over"  # the condition holds: one outcome per child ('' for one not ended)
    PARKED = "parked"  # the run is parked: its lease is gone, the handler must unwind
    TIMED_OUT = "timed_out"  # the deadline came first
    STRANGER = "stranger"  # an id that is not this run's child: nothing written
    CANCELLING = "cancelling"  # a client is cancelling the run: it was not parked
    FULL = "full"  # a new step past the run's bound of waits: nothing written


_JOIN_OUTCOMES = {
    ScriptCode.REPLAYED: JoinOutcome.OVER,
    ScriptCode.OK: JoinOutcome.PARKED,
    ScriptCode.TIMEOUT: JoinOutcome.TIMED_OUT,
    ScriptCode.INVALID: JoinOutcome.STRANGER,
    ScriptCode.CANCEL: JoinOutcome.CANCELLING,
    ScriptCode.FULL: JoinOutcome.FULL,
}


@dataclass(frozen=True)
class JoinAnswer:
    """``join_children``'s answer: ``outcomes`` (OVER), ``until_ms``, the ``stranger`` id."""

    outcome: JoinOutcome
    outcomes: list[str]
    until_ms: int | None = None
    stranger: str = ""


@dataclass(frozen=True)
class SpawnStep:
    """One spawn step as the parent recorded it: the child and what it inherits."""

    answer: SpawnAnswer
    child_id: str
    root_id: str
    depth: int
    concurrency_key: str | None
    traceparent: str | None
    # a replayed step whose child's outcome came already: it exists or existed
    ended: bool = False
    count: int = 0  # FULL: how many children the parent has


@dataclass(frozen=True)
class SpawnLimits:
    """The bounds a spawn is checked against (LEASEHOLD_MAX_CHILDREN_PER_RUN, _MAX_RUN_DEPTH)."""

    max_children: int = 10_000
    max_depth: int = 16


class ChildStore(Store):
    """Records a parent's spawn steps, creates its children and parks its joins."""

    def __init__(self, ctx: StoreContext, *, max_waits: int = 10_000) -> None:
        super().__init__(ctx)
        # fields a run's waits hash may hold (a join is a wait): LEASEHOLD_MAX_WAITS_PER_RUN
        self.max_waits = max_waits

    async def record_spawn(
        self,
        lease: Lease,
        *,
        ordinal: int,
        child_queue: str,
        on_parent_end: OnParentEnd,
        limits: SpawnLimits,
        position: int | None = None,
    ) -> SpawnStep:
        """Record spawn step ``ordinal`` of the parent (fenced) and name its child.

        A new step gets a new id on ``child_queue``; a recorded one answers its child.
        Raises :class:`LeaseLost` when fenced out (nothing written).
        """
        args = SpawnArgs(
            owner_id=lease.owner_id,
            fence=lease.fence,
            run_id=lease.run_id,
            ordinal=ordinal,
            child_id=new_run_id(child_queue),
            on_parent_end=on_parent_end.value,
            max_children=limits.max_children,
            max_depth=limits.max_depth,
            position="" if position is None else position,
        )
        reply: SpawnReply = await SPAWN_CHILD.send(
            self.scripts, self.client, self.keys(lease.queue), args
        )
        if reply.code == ScriptCode.LOST:
            raise LeaseLost(lease.run_id, lease.fence)
        answer = _ANSWERS[ScriptCode(reply.code)]
        full = answer == SpawnAnswer.FULL
        return SpawnStep(
            answer=answer,
            child_id="" if full else reply.child_id,
            root_id=reply.root_id,
            depth=reply.depth,
            concurrency_key=reply.concurrency_key or None,
            traceparent=reply.traceparent or None,
            ended=reply.ended,
            count=int(reply.child_id) if full else 0,
        )

    async def create_child(self, child: NewRun) -> bool:
        """Create the child a spawn step named (``child.run_id``): once, however often called.

        True when this call created it; False when it existed already (a replay of the
        step: nothing written, and no read of it). Raises
        :class:`~app.errors.InvalidTransition` (status cancelled) when the parent's end
        cancelled the child before it was created.
        """
        assert child.run_id and child.parent_id, "a child is created with its step's id"
        runs = RunStore(self.ctx)
        reply = await CREATE_RUN.send(
            self.scripts, self.client, self.keys(child.queue), runs.create_args(child)
        )
        if reply.code == ScriptCode.CANCEL:
            raise InvalidTransition(child.run_id, RunStatus.CANCELLED.value, "create")
        return reply.code == ScriptCode.OK

    async def join(
        self,
        lease: Lease,
        *,
        ordinal: int,
        mode: JoinMode,
        child_ids: list[str],
        timeout_ms: int | None,
        position: int | None = None,
    ) -> JoinAnswer:
        """Join step ``ordinal`` of the parent on ``child_ids``: over, or parked (fenced).

        Raises :class:`LeaseLost` when fenced out (nothing written).
        """
        keys = self.keys(lease.queue)
        args = JoinArgs(
            owner_id=lease.owner_id,
            fence=lease.fence,
            run_id=lease.run_id,
            ordinal=ordinal,
            mode=mode.value,
            timeout_ms="" if timeout_ms is None else timeout_ms,
            maxlen=self.events_maxlen,
            wake_channel=keys.wake_channel,
            max_waits=self.max_waits,
            position="" if position is None else position,
            groups=[ChildIdGroup(child_id) for child_id in child_ids],
        )
        reply = await JOIN_CHILDREN.send(self.scripts, self.client, keys, args)
        if reply.code == ScriptCode.LOST:  # INVALID is a stranger's id here, not a status
            raise LeaseLost(lease.run_id, lease.fence)
        outcome = _JOIN_OUTCOMES[ScriptCode(reply.code)]
        if outcome == JoinOutcome.STRANGER:
            return JoinAnswer(outcome, [], stranger=reply.value)
        until = int(reply.value) if reply.value.isdigit() else None
        return JoinAnswer(outcome, reply.outcomes, until_ms=until)
