"""Runs that start runs: ``ctx.spawn`` and ``ctx.join`` (and what a child inherits).

``child = await ctx.spawn("summarize", {"text": ...}, queue="llm")`` creates a run
linked to this one (``parent_id``, ``root_id``, ``depth``) and returns a
:class:`Child` handle at once; the child is queued like any run, takes slots like
any run, and its worker need not be this one.

**Exactly once.** A spawn is a step of the parent, numbered ``spawn:<n>`` per run
and saved with every checkpoint like effects and waits (so a handler resuming from
its checkpoint numbers its spawns as the interrupted attempt did). One fenced
script in the parent's slot (``spawn_child``) records which child the step names
*before* the child is created; the child is then created with that id, and
creating an id that exists creates nothing. So a parent taken over after a spawn,
even between the record and the create, gets the same child back, and no second
one ever exists. As with effects, keep the order of spawns between checkpoints
deterministic.

**What a child inherits**: the parent's concurrency key (unless given one), its
tracing context (the child's attempts join the parent's trace), ``root_id`` and
``depth + 1``. Everything else is the child's own: its handler's defaults, then
the options given here.

**Joining.** ``await ctx.join(children, mode="all", timeout_s=None)`` is a durable
wait (numbered ``join:<n>``): one fenced script (``join_children``) checks the
outcomes delivered so far and, when its condition does not hold, parks the run in
the same step (no lease, no slot, a ``wait`` event of kind ``join``); the handler
is unwound and runs again from the top when the condition holds (the children's
ends reach the parent's slot through the outbox, :mod:`app.store.outbox.store`) or its
timeout comes, its earlier spawns replaying the same children. ``all`` returns the
outputs in order and raises :class:`~app.errors.ChildFailed` for the first child
(in the order given) that failed, was cancelled, orphaned or expired, as soon as
one has; ``any`` returns the first success in order (``ChildFailed`` when every
child failed); ``settled`` returns a :class:`ChildOutcome` per child. Past
``timeout_s``: :class:`~app.errors.JoinTimeout`. An id that is not this run's
child, ``join([])`` or a duplicate: :class:`~app.errors.InvalidWait`.

**Admitted like a create** (:mod:`app.store.admission`): while Redis memory is past
LEASEHOLD_MEMORY_HIGH_WATER a spawn waits, before its step is numbered, until memory
frees (a ``wait`` event of kind ``memory`` says so; the lease stays renewed, a
cancel or a budget still ends it), so a handler spawning in a loop cannot fill
Redis. A replay of a recorded spawn waits the same way: nothing is numbered twice.

**Refused before anything is written** (:class:`~app.errors.SpawnRefused`, in the
handler): a handler this worker does not know or whose input model refuses the
input (as ``POST /runs`` refuses them), an undeclared queue, an input over
LEASEHOLD_MAX_INPUT_BYTES, a child past LEASEHOLD_MAX_CHILDREN_PER_RUN or deeper
than LEASEHOLD_MAX_RUN_DEPTH (a handler that spawns itself stops there).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, Unpack

from pydantic import BaseModel

from app.errors import (
    ChildFailed,
    HandlerError,
    InvalidTransition,
    InvalidWait,
    JoinTimeout,
    LeaseLost,
    MemoryPressure,
    SpawnRefused,
)
from app.executor.effects import EffectLedger, send_until_taken
from app.executor.events import EventSink
from app.executor.reasons import RunParked, StopReason
from app.handlers import HandlerRegistry
from app.models import FLOW_KEY, RUN_ID, OnLeaseExpired, Versioning
from app.store.admission import MemoryAdmission, create_cost_bytes
from app.store.family.children import (
    ChildStore,
    JoinAnswer,
    JoinMode,
    JoinOutcome,
    OnParentEnd,
    SpawnAnswer,
    SpawnLimits,
    SpawnStep,
)
from app.store.leases.store import Lease
from app.store.outbox.store import Outbox
from app.store.queues.store import QueueStore
from app.store.runs.new import NewRun, metadata_bytes

log = logging.getLogger(__name__)

# the counter spawns are numbered under: an effect's name cannot hold ':' (no clash)
T = TypeVar("T")

SPAWN_COUNTER = "spawn:"
JOIN_COUNTER = "join:"
MAX_ATTEMPTS = 1000  # as POST /runs and the settings bound max_attempts


@dataclass(frozen=True)
class Child:
    """A child run this run spawned: what ``ctx.join`` takes, and its id to show or store."""

    id: str
    queue: str
    handler: str
    step: int  # the spawn step that named it (spawn:<step>)


class SpawnOptions(TypedDict, total=False):
    """The run options ``ctx.spawn`` takes beside the handler and its input."""

    queue: str | None  # the child's queue; None: the parent's
    on_parent_end: str  # "cancel" (default) or "detach"
    concurrency_key: str | None  # None: the parent's
    max_attempts: int | None  # None: the handler's default, else the deployment's
    on_lease_expired: OnLeaseExpired | None
    metadata: dict[str, Any] | None


@dataclass(frozen=True)
class ChildOutcome:
    """How one joined child ended (``ctx.join(..., mode="settled")``)."""

    child_id: str
    status: str  # succeeded, failed, cancelled, orphaned, expired
    output: Any = None
    error: dict[str, Any] | None = None

    @property
    def succeeded(self) -> bool:
        """True when the child succeeded (``output`` is its result)."""
        return self.status == "succeeded"


@dataclass(frozen=True)
class FamilyDeps:
    """What every run's spawns share: the stores, the registry, the bounds and defaults."""

    store: ChildStore
    queues: QueueStore
    registry: HandlerRegistry
    limits: SpawnLimits
    max_input_bytes: int
    max_metadata_bytes: int
    default_max_attempts: int
    default_on_lease_expired: OnLeaseExpired
    default_versioning: Versioning
    outbox: Outbox | None = None  # None: ends are left to the reconcilers' sweep
    max_wait_s: float = 30 * 24 * 3600.0
    admission: MemoryAdmission | None = None  # None: spawns are not held back for memory


class Family:
    """The children of one run, spawned as one owner at one fence."""

    def __init__(
        self,
        deps: FamilyDeps,
        lease: Lease,
        *,
        ledger: EffectLedger,
        sink: EventSink,
        on_stop: Callable[[StopReason], None],
    ) -> None:
        self._deps = deps
        self._lease = lease
        self._ledger = ledger
        self._sink = sink
        self._on_stop = on_stop

    async def spawn(
        self, handler: str, input: Any = None, **options: Unpack[SpawnOptions]
    ) -> Child:
        """Create child run ``handler(input)`` once for this spawn step; see the module doc.

        Raises :class:`SpawnRefused` (nothing created), :class:`LeaseLost` when fenced
        out, and unwinds (``RunParked``) when a client is cancelling this run.
        """
        unknown = set(options) - set(SpawnOptions.__annotations__)
        if unknown:
            raise SpawnRefused(f"unknown spawn options: {sorted(unknown)}")
        queue = options.get("queue")
        concurrency_key = options.get("concurrency_key")
        child_queue = queue or self._lease.queue
        policy = _policy(options.get("on_parent_end", "cancel"))
        child = await self._checked(
            handler,
            input,
            child_queue,
            concurrency_key=concurrency_key,
            max_attempts=options.get("max_attempts"),
            on_lease_expired=options.get("on_lease_expired"),
            metadata=options.get("metadata"),
        )
        await self._room_for(child["encoded_input"], handler)
        ordinal, position = await self._ledger.next_step(SPAWN_COUNTER, "s")
        step = await self._record(ordinal, child_queue, policy, position)
        new = NewRun(
            **{**child, "concurrency_key": concurrency_key or step.concurrency_key},
            run_id=step.child_id,
            parent_id=self._lease.run_id,
            root_id=step.root_id,
            depth=step.depth,
            traceparent=self._ledger.trace_parent or step.traceparent,
        )
        if not step.ended:
            await self._create(new)
        if step.answer == SpawnAnswer.NEW:
            await self._sink.add(
                "child_spawned",
                {
                    "child_id": step.child_id,
                    "handler": handler,
                    "queue": child_queue,
                    "step": ordinal,
                    "on_parent_end": policy.value,
                },
            )
        return Child(step.child_id, child_queue, handler, ordinal)

    async def _room_for(self, encoded_input: str, handler: str) -> None:
        """Wait, visibly, while Redis memory has no room for one more run."""
        admission = self._deps.admission
        if admission is None:
            return

        async def say(refused: MemoryPressure) -> None:
            await self._sink.add(
                "wait",
                {
                    "kind": "memory",
                    "what": f"spawn of {handler}",
                    "reason": str(refused),
                    "used_bytes": refused.used_bytes,
                    "max_bytes": refused.max_bytes,
                    "high_water": refused.high_water,
                },
            )

        await admission.wait_for_room(create_cost_bytes(len(encoded_input.encode())), on_wait=say)

    async def join(
        self, children: Sequence[Child | str], *, mode: str = "all", timeout_s: float | None = None
    ) -> Any:
        """Wait, parked, until ``children`` meet ``mode``; see the module docstring."""
        ids = self._join_ids(children)
        join_mode = _join_mode(mode)
        timeout_ms = None if timeout_s is None else self._timeout_ms(timeout_s)
        ordinal, position = await self._ledger.next_step(JOIN_COUNTER, "j")
        # resent after a lost reply that parked the run, it answers LOST: parked either way
        answer = await self._fenced(
            "join",
            lambda: self._deps.store.join(
                self._lease,
                ordinal=ordinal,
                mode=join_mode,
                child_ids=ids,
                timeout_ms=timeout_ms,
                position=position,
            ),
        )
        return self._joined(answer, ids, join_mode, ordinal, timeout_s)

    def _joined(
        self,
        answer: JoinAnswer,
        ids: list[str],
        mode: JoinMode,
        ordinal: int,
        timeout_s: float | None,
    ) -> Any:
        step = f"join:{ordinal}"
        if answer.outcome == JoinOutcome.OVER:
            return _results(mode, ids, answer.outcomes)
        if answer.outcome == JoinOutcome.TIMED_OUT:
            raise JoinTimeout(
                f"the children did not meet mode={mode.value!r} within timeout_s={timeout_s}",
                details={"step": step, "until_ms": answer.until_ms, "children": len(ids)},
            )
        if answer.outcome == JoinOutcome.STRANGER:
            raise InvalidWait(
                f"{answer.stranger} is not a child of this run: only its own children "
                "(ctx.spawn) may be joined",
                details={"child_id": answer.stranger},
            )
        if answer.outcome == JoinOutcome.FULL:
            raise InvalidWait(
                f"the run already holds {self._deps.store.max_waits} waits "
                "(LEASEHOLD_MAX_WAITS_PER_RUN)",
                details={"step": step, "limit": self._deps.store.max_waits},
            )
        reason = (
            StopReason.CANCEL_REQUESTED
            if answer.outcome == JoinOutcome.CANCELLING
            else StopReason.PARKED
        )
        self._on_stop(reason)
        raise RunParked(step)

    def _join_ids(self, children: Sequence[Child | str]) -> list[str]:
        if isinstance(children, str | Child) or not isinstance(children, Sequence):
            raise InvalidWait("ctx.join takes a list of children (Child handles or run ids)")
        ids = [child.id if isinstance(child, Child) else child for child in children]
        if not ids:
            raise InvalidWait("ctx.join of no children: nothing to wait for")
        bad = [i for i in ids if not isinstance(i, str) or not RUN_ID.fullmatch(i)]
        if bad:
            raise InvalidWait(f"not run ids: {bad[:3]!r}", details={"child_id": repr(bad[0])[:200]})
        if len(set(ids)) != len(ids):
            raise InvalidWait("ctx.join names a child twice")
        if len(ids) > self._deps.limits.max_children:
            raise InvalidWait(
                f"ctx.join of {len(ids)} children; a run has at most "
                f"{self._deps.limits.max_children} (LEASEHOLD_MAX_CHILDREN_PER_RUN)"
            )
        return ids

    def _timeout_ms(self, seconds: Any) -> int:
        limit = self._deps.max_wait_s
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or not 0 <= seconds <= limit
        ):
            raise InvalidWait(
                f"timeout_s must be a finite number of seconds from 0 to {limit:g} "
                f"(LEASEHOLD_MAX_WAIT_S); got {seconds!r}",
                details={"timeout_s": repr(seconds)},
            )
        return math.ceil(seconds * 1000)

    async def deliver_end(self) -> None:
        """After this run's terminal write: its cascade, at once (the sweep would, later).

        Never raises: what is not delivered now stays in the outbox for the sweep.
        """
        if self._deps.outbox is None:
            return
        try:
            await self._deps.outbox.deliver_end_of(self._lease.run_id)
        except Exception:  # the sweep delivers it: a failure here must not fail the run
            log.warning(
                "the run's end was left to the outbox sweep", exc_info=True, extra=self._log_extra()
            )

    async def _checked(self, handler: str, input: Any, queue: str, **opts: Any) -> dict[str, Any]:
        """The child's NewRun fields, or :class:`SpawnRefused`: checked before any write."""
        try:
            spec = self._deps.registry.get(handler)
            raw = input.model_dump(mode="json") if isinstance(input, BaseModel) else input
            spec.parse_input(raw)
            encoded = _strict_json(raw)
        except HandlerError as exc:
            raise SpawnRefused(str(exc), details={"handler": handler}) from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise SpawnRefused(f"the child's input is not JSON: {exc}") from None
        size = len(encoded.encode())
        if size > self._deps.max_input_bytes:
            raise SpawnRefused(
                f"the child's input is {size} bytes; the limit is {self._deps.max_input_bytes} "
                "(LEASEHOLD_MAX_INPUT_BYTES)",
                details={"size_bytes": size, "limit_bytes": self._deps.max_input_bytes},
            )
        _check_options(**opts, max_metadata_bytes=self._deps.max_metadata_bytes)
        if not await self._deps.queues.is_declared(queue):
            raise SpawnRefused(f"queue {queue!r} is not declared", details={"queue": queue})
        return {
            "handler": handler,
            "input": raw,
            "encoded_input": encoded,
            "queue": queue,
            "max_attempts": opts["max_attempts"]
            or spec.defaults.max_attempts
            or self._deps.default_max_attempts,
            "on_lease_expired": opts["on_lease_expired"]
            or spec.defaults.on_lease_expired
            or self._deps.default_on_lease_expired,
            "metadata": opts["metadata"] or {},
            "budget": spec.defaults.merged_budget(None),
            "versioning": spec.defaults.pinned(None, self._deps.default_versioning),
        }

    async def _fenced(self, what: str, write: Callable[[], Awaitable[T]]) -> T:
        """Send a fenced write of the run, after the events the handler emitted before it.

        Retried while Redis refuses it transiently; a lease lost stops the run and raises.
        """
        await self._sink.flush()  # what the handler emitted before this comes first
        try:
            return await send_until_taken(write)
        except LeaseLost:
            log.warning("%s rejected: lease lost", what, extra=self._log_extra())
            self._on_stop(StopReason.LEASE_LOST)
            raise

    async def _record(
        self, ordinal: int, child_queue: str, policy: OnParentEnd, position: int
    ) -> SpawnStep:
        limits = self._deps.limits
        # resent after a lost reply, the step answers REPLAYED with the same child
        step = await self._fenced(
            "spawn",
            lambda: self._deps.store.record_spawn(
                self._lease,
                ordinal=ordinal,
                child_queue=child_queue,
                on_parent_end=policy,
                limits=limits,
                position=position,
            ),
        )
        if step.answer == SpawnAnswer.CANCELLING:
            self._on_stop(StopReason.CANCEL_REQUESTED)
            raise RunParked(f"spawn:{ordinal}")
        if step.answer == SpawnAnswer.FULL:
            raise SpawnRefused(
                f"the run has {step.count} children; the most one run may spawn is "
                f"{limits.max_children} (LEASEHOLD_MAX_CHILDREN_PER_RUN)",
                details={"children": step.count, "limit": limits.max_children},
            )
        if step.answer == SpawnAnswer.TOO_DEEP:
            raise SpawnRefused(
                f"the child would sit at depth {step.depth}; the deepest allowed is "
                f"{limits.max_depth} (LEASEHOLD_MAX_RUN_DEPTH)",
                details={"depth": step.depth, "limit": limits.max_depth, "root_id": step.root_id},
            )
        return step

    async def _create(self, new: NewRun) -> None:
        try:
            # the same id again creates nothing (REPLAYED): a takeover's spawn is a no-op
            await send_until_taken(lambda: self._deps.store.create_child(new))
        except InvalidTransition:
            # this run's end cancelled the child before it existed: this attempt is stale,
            # and the child's outcome (cancelled) is what a join of it would see
            log.info("child %s was cancelled before it was created", new.run_id)

    def _log_extra(self) -> dict[str, Any]:
        lease = self._lease
        return {"run_id": lease.run_id, "owner_id": lease.owner_id, "fence": lease.fence}


def _check_options(
    *,
    concurrency_key: Any,
    max_attempts: Any,
    on_lease_expired: Any,
    metadata: Any,
    max_metadata_bytes: int,
) -> None:
    """Refuse (SpawnRefused) the run options ``POST /runs`` would refuse with a 422."""
    problems: dict[str, str] = {}
    if concurrency_key is not None and (
        not isinstance(concurrency_key, str) or not FLOW_KEY.fullmatch(concurrency_key)
    ):
        problems["concurrency_key"] = f"must match {FLOW_KEY.pattern}"
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS
    ):
        problems["max_attempts"] = f"must be an integer from 1 to {MAX_ATTEMPTS}"
    if on_lease_expired not in (None, "orphan", "retry"):
        problems["on_lease_expired"] = "must be 'orphan' or 'retry'"
    if metadata is not None:
        try:
            ok = isinstance(metadata, dict) and bool(_strict_json(metadata))
        except (TypeError, ValueError, RecursionError):
            ok = False
        if not ok:
            problems["metadata"] = "must be a JSON object"
        elif (size := metadata_bytes(metadata)) > max_metadata_bytes:
            problems["metadata"] = (
                f"is {size} bytes of JSON; the limit is {max_metadata_bytes} "
                "(LEASEHOLD_MAX_METADATA_BYTES)"
            )
    if problems:
        raise SpawnRefused(
            "bad spawn options: " + "; ".join(f"{k} {v}" for k, v in problems.items()),
            details=problems,
        )


def _strict_json(value: Any) -> str:
    """The stored JSON text of ``value``; raises for what POST /runs refuses (NaN, Infinity)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _join_mode(value: str) -> JoinMode:
    try:
        return JoinMode(value)
    except ValueError:
        raise InvalidWait(
            f"mode must be 'all', 'any' or 'settled'; got {value!r}", details={"mode": repr(value)}
        ) from None


def _results(mode: JoinMode, ids: list[str], raw: list[str]) -> Any:
    """What ``ctx.join`` returns for the delivered outcomes (raises ChildFailed per ``mode``)."""
    ended = [
        ChildOutcome(child_id, **_decoded(text)) if text else None
        for child_id, text in zip(ids, raw, strict=True)
    ]
    outcomes = [outcome for outcome in ended if outcome is not None]
    failed = [outcome for outcome in outcomes if not outcome.succeeded]
    if mode == JoinMode.SETTLED:
        return outcomes
    if mode == JoinMode.ANY:
        for outcome in outcomes:
            if outcome.succeeded:
                return outcome.output
    if failed:
        first = failed[0]
        raise ChildFailed(first.child_id, first.status, first.error)
    return [outcome.output for outcome in outcomes]


def _decoded(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return {"status": value["status"], "output": value.get("output"), "error": value.get("error")}


def _policy(value: str) -> OnParentEnd:
    try:
        return OnParentEnd(value)
    except ValueError:
        raise SpawnRefused(
            f"on_parent_end must be 'cancel' or 'detach'; got {value!r}",
            details={"on_parent_end": repr(value)},
        ) from None
