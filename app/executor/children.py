"""Runs that start runs: ``ctx.spawn`` (and, with it, what a child inherits).

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

**Refused before anything is written** (:class:`~app.errors.SpawnRefused`, in the
handler): a handler this worker does not know or whose input model refuses the
input (as ``POST /runs`` refuses them), an undeclared queue, an input over
LEASEHOLD_MAX_INPUT_BYTES, a child past LEASEHOLD_MAX_CHILDREN_PER_RUN or deeper
than LEASEHOLD_MAX_RUN_DEPTH (a handler that spawns itself stops there).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from pydantic import BaseModel

from app.errors import HandlerError, InvalidTransition, LeaseLost, SpawnRefused
from app.executor.effects import EffectLedger, send_until_taken
from app.executor.events import EventSink
from app.executor.reasons import StopReason
from app.executor.waits import RunParked
from app.handlers import HandlerRegistry
from app.models import FLOW_KEY, OnLeaseExpired
from app.store.children import ChildStore, OnParentEnd, SpawnAnswer, SpawnLimits, SpawnStep
from app.store.leases import Lease
from app.store.queues import QueueStore
from app.store.runs import NewRun

log = logging.getLogger(__name__)

# the counter spawns are numbered under: an effect's name cannot hold ':' (no clash)
SPAWN_COUNTER = "spawn:"
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
class FamilyDeps:
    """What every run's spawns share: the stores, the registry, the bounds and defaults."""

    store: ChildStore
    queues: QueueStore
    registry: HandlerRegistry
    limits: SpawnLimits
    max_input_bytes: int
    default_max_attempts: int
    default_on_lease_expired: OnLeaseExpired


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
        ordinal = await self._ledger.next_ordinal(SPAWN_COUNTER)
        step = await self._record(ordinal, child_queue, policy)
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
        _check_options(**opts)
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
        }

    async def _record(self, ordinal: int, child_queue: str, policy: OnParentEnd) -> SpawnStep:
        await self._sink.flush()  # what the handler emitted before the spawn comes first
        limits = self._deps.limits
        try:
            # resent after a lost reply, the step answers REPLAYED with the same child
            step = await send_until_taken(
                lambda: self._deps.store.record_spawn(
                    self._lease,
                    ordinal=ordinal,
                    child_queue=child_queue,
                    on_parent_end=policy,
                    limits=limits,
                )
            )
        except LeaseLost:
            log.warning("spawn rejected: lease lost", extra=self._log_extra())
            self._on_stop(StopReason.LEASE_LOST)
            raise
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
    if problems:
        raise SpawnRefused(
            "bad spawn options: " + "; ".join(f"{k} {v}" for k, v in problems.items()),
            details=problems,
        )


def _strict_json(value: Any) -> str:
    """The stored JSON text of ``value``; raises for what POST /runs refuses (NaN, Infinity)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _policy(value: str) -> OnParentEnd:
    try:
        return OnParentEnd(value)
    except ValueError:
        raise SpawnRefused(
            f"on_parent_end must be 'cancel' or 'detach'; got {value!r}",
            details={"on_parent_end": repr(value)},
        ) from None
