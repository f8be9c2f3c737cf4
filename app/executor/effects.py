"""Checkpoints and memoized side effects: how a run resumes without repeating itself.

A run may be executed several times: retried after an error, taken over after
its worker died, released on drain, resumed after a person. Two tools make the
later attempt continue rather than start over:

* ``ctx.checkpoint(state)`` stores JSON state with a fenced write (and a
  ``checkpoint`` event); the next attempt finds it in ``ctx.state``.
* ``ctx.effect(name, fn, idempotent=False)`` runs a side effect at most once
  per run. Before ``fn`` runs, a fenced ``started`` record is written; ``fn``
  gets an idempotency key for the downstream system; its JSON result is recorded
  by a second fenced write. A later attempt gets the recorded result without
  calling ``fn``. A ``started`` record without a result means nobody knows
  whether the side effect happened: an idempotent effect is called again with
  the same key; any other parks the run in ``reconciliation_required`` for a
  person (``EffectOutcomeUnknown`` is raised to stop the handler).

Decisions behind the contract:

* **The key** of a call is ``<run id>:<name>:<ordinal>`` (a re-run made by
  ``POST /runs/{id}/retry`` keeps its first run's id there), the ordinal counting
  this run's calls *of that name* from 1. Counting per name keeps a key stable
  when the handler adds, removes or reorders calls of other names. The counts
  are saved with every checkpoint and restored on the next attempt, so a handler
  that resumes from ``ctx.state`` (skipping the calls before its checkpoint)
  numbers its next calls exactly as the interrupted attempt did. Keys are
  therefore deterministic as long as the handler makes the same calls in the
  same order between checkpoints; concurrent calls of one name (``gather``) are
  numbered in the order they start.
* **The value** a call returns is the JSON round trip of ``fn``'s result, on the
  first attempt as on a replay, so the handler cannot tell them apart.
* **A failing ``fn``** leaves its outcome unknown (a timeout may hide a success),
  except when it raises :class:`~app.errors.EffectNotApplied`: then the record is
  dropped and a later call runs it again.
* **Ordering**: handler events emitted before a checkpoint or effect are flushed
  first, so the stream shows them in the order they happened.
* **Cancellation**: an ``async def`` ``fn`` is cancelled with the run (a drain,
  a client's cancel, a lost lease), and its outcome is then unknown. A sync
  ``fn`` runs in a thread, which cannot be cancelled: it finishes whatever the
  run does, so it is awaited and its result recorded whatever the run does.
  Either way, once ``fn`` has returned its result is written even if the run is
  being cancelled (shielded, like the terminal write): a cancellation must not
  turn a known outcome into an unknown one. Every write
  here is retried on a dropped connection; the effect scripts answer a repeat of
  the same owner's write as done (a checkpoint just writes the same state again),
  so a lost reply never parks a run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from pydantic import BaseModel

from app.errors import (
    CheckpointTooLarge,
    EffectNotApplied,
    EffectOutcomeUnknown,
    InvalidCheckpoint,
    InvalidEffect,
    InvalidEffectResult,
    LeaseLost,
    VersionDrift,
)
from app.executor.events import EventSink
from app.retry import REDIS_BACKOFF, retrying
from app.store.codec import dumps
from app.store.leases.store import Lease
from app.store.progress.store import (
    POSITION_ENTRY,
    EffectAnswer,
    EffectCall,
    EffectOutcome,
    EffectStart,
    ProgressStore,
)
from app.store.redis.refusals import describe, is_transient
from app.telemetry.tracing import Attributes, Span, tracer

log = logging.getLogger(__name__)

EFFECT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

EffectFn = Callable[[str], Any]
# the steps a drift's details list at most, of each sequence
DRIFT_SHOWN = 200
T = TypeVar("T")


class EffectLedger:
    """The checkpoints and effect records of one run, written as one owner at one fence."""

    def __init__(
        self,
        store: ProgressStore,
        lease: Lease,
        *,
        sink: EventSink,
        max_bytes: int,
        on_lost: Callable[[], None],
        on_parked: Callable[[], None],
    ) -> None:
        self._store = store
        self._lease = lease
        self._sink = sink
        self._max_bytes = max_bytes
        self._on_lost = on_lost
        self._on_parked = on_parked
        self._seq: dict[str, int] | None = None
        # a re-run's effect keys start with its first run's id (store/reruns.py)
        self._key_root = ""
        # the drift check: this attempt's next step position, the steps the run recorded
        # from the last checkpoint's position on, and the ones this attempt took
        self._position = 0
        self._recorded: dict[int, str] = {}
        self._taken: list[str] = []
        # the attempt's span context (set by the execution), for effects called from threads
        self.trace_parent: str | None = None

    async def checkpoint(self, state: Any) -> Any:
        """Store ``state``; returns it as a later attempt will see it (its JSON round trip).

        Raises :class:`InvalidCheckpoint` / :class:`CheckpointTooLarge` before writing
        anything, and :class:`LeaseLost` when fenced out (the run is stopped).
        """
        payload = self._encode_state(state)
        seq_json = (
            dumps({**self._seq, POSITION_ENTRY: self._position}) if self._seq is not None else ""
        )
        await self._sink.flush()
        try:
            await send_until_taken(
                lambda: self._store.checkpoint(
                    self._lease,
                    state_json=payload,
                    effect_seq_json=seq_json,
                )
            )
        except LeaseLost:
            raise self._lost("checkpoint") from None
        return json.loads(payload)

    async def effect(self, name: str, fn: EffectFn, *, idempotent: bool = False) -> Any:
        """Run ``fn(key)`` at most once for this call of the run; see the module docstring.

        Raises :class:`InvalidEffect` for a bad name, :class:`InvalidEffectResult` when
        the result cannot be recorded, :class:`EffectOutcomeUnknown` when the run was
        parked, :class:`LeaseLost` when fenced out, and whatever ``fn`` raises.
        """
        # a sync handler's effect_sync arrives here outside the run's context: then the
        # attempt's span is its parent
        parent = None if tracer().current_ids() else self.trace_parent
        attributes: Attributes = {"leasehold.effect": name, "leasehold.idempotent": idempotent}
        with tracer().span(f"leasehold.effect {name}", attributes, parent=parent) as span:
            return await self._effect(name, fn, idempotent, span)

    async def _effect(self, name: str, fn: EffectFn, idempotent: bool, span: Span) -> Any:
        call = await self._next_call(name, idempotent)
        await self._sink.flush()
        try:
            started = await send_until_taken(lambda: self._store.start_effect(self._lease, call))
        except LeaseLost:
            raise self._lost("effect start") from None
        if started.answer == EffectAnswer.REPLAYED:
            span.set_attributes({"leasehold.replayed": True})
            return json.loads(started.result_json)
        self._check_started(started)
        if inspect.iscoroutinefunction(fn):
            return await self._perform(call, fn)
        # a thread cannot be cancelled: the side effect finishes whatever the run does,
        # so its result is recorded whatever the run does
        return await _shielded(self._perform(call, fn))

    async def _perform(self, call: EffectCall, fn: EffectFn) -> Any:
        try:
            value = await _invoke(fn, call.key)
        except EffectNotApplied:
            await self._record(call, EffectOutcome.NOT_APPLIED)
            raise
        result_json = self._encode_result(call, value)
        await self._record(call, EffectOutcome.APPLIED, result_json)
        return json.loads(result_json)

    async def _next_call(self, name: str, idempotent: bool) -> EffectCall:
        if not EFFECT_NAME.fullmatch(name):
            raise InvalidEffect(
                f"effect name {name!r} must match {EFFECT_NAME.pattern}",
                details={"name": name},
            )
        ordinal, position = await self.next_step(name, "e")
        return EffectCall(
            self._lease.run_id, name, ordinal, idempotent, self._key_root, position=position
        )

    async def next_ordinal(self, counter: str) -> int:
        """The next call's ordinal of ``counter`` (an effect's name, or a wait's step kind).

        The counts start where the last checkpoint saved them, and every checkpoint
        saves them all: durable waits (:mod:`app.executor.waits`) count here too, under
        names an effect cannot have (``sleep:<name>``...), so a handler resuming from
        its checkpoint numbers its waits as the interrupted attempt did.
        """
        seq = await self._loaded()
        seq[counter] = seq.get(counter, 0) + 1
        return seq[counter]

    async def _loaded(self) -> dict[str, int]:
        """The counts (and the step log) the run recorded, read on the attempt's first
        step: where a handler resuming from its last checkpoint continues."""
        if self._seq is None:
            start = await self._store.replay_start(self._lease.queue, self._lease.run_id)
            if self._seq is None:  # a concurrent first call may have loaded them already
                self._seq, self._key_root = start.counts, start.key_root
                self._position, self._recorded = start.position, start.recorded
        return self._seq

    async def next_step(self, counter: str, kind: str) -> tuple[int, int]:
        """The next call's ordinal of ``counter`` and its step position, checked against
        what the run recorded there: raises :class:`VersionDrift` (the run parked) when
        an earlier attempt took another step at this position.

        ``kind``: ``e`` an effect, ``w`` a wait, ``s`` a spawn, as includes/steps.lua
        notes them. Positions count every step from the last checkpoint's, in the order
        the handler asks for them (concurrent steps: the order they start in).
        """
        ordinal = await self.next_ordinal(counter)
        position = self._position
        self._position += 1
        field = f"{counter}{ordinal}" if counter.endswith(":") else f"{counter}:{ordinal}"
        entry = f"{kind}|{field}"
        self._taken.append(entry)
        recorded = self._recorded.get(position)
        if recorded is not None and recorded != entry:
            await self._drift(position, recorded, entry)
        return ordinal, position

    @property
    def steps_taken(self) -> list[str]:
        """The steps this attempt asked for so far, ``<kind>|<field>`` in order (what the
        drift check compares: a replay's report lists them)."""
        return list(self._taken)

    async def patched(self, patch_id: str) -> bool:
        """Whether the run takes the patched code at change ``patch_id``: decided once per
        run and recorded, so every replay takes the same branch.

        A run with steps recorded past this point went on there under the code before
        the patch: it keeps to that code (False). Any other run takes the patch (True).
        A patch takes no step position: adding ``ctx.patched`` never shifts a run's steps.
        """
        self.check_patch_id(patch_id)
        await self._loaded()
        passed = any(position >= self._position for position in self._recorded)
        await self._sink.flush()
        try:
            return await send_until_taken(
                lambda: self._store.note_patch(self._lease, patch_id, proposed=not passed)
            )
        except LeaseLost:
            raise self._lost("patch") from None

    async def check_end(self) -> None:
        """The handler returned: a step the run recorded past this attempt's last one is
        a step the code it met no longer takes — drift, reported like another step."""
        missing = sorted(position for position in self._recorded if position >= self._position)
        if missing:
            await self._drift(missing[0], self._recorded[missing[0]], "(the handler returned)")

    def check_patch_id(self, patch_id: str) -> None:
        """Raise :class:`InvalidEffect` unless ``patch_id`` is a valid change id."""
        if not isinstance(patch_id, str) or not EFFECT_NAME.fullmatch(patch_id):
            raise InvalidEffect(
                f"patch id {patch_id!r} must match {EFFECT_NAME.pattern}",
                details={"patch_id": str(patch_id)[:200]},
            )

    async def _drift(self, position: int, recorded: str, taken: str) -> None:
        """Park the run for a person (version_drift) and stop the handler."""
        details = {
            "position": position,
            "recorded": recorded,
            "taken": taken,
            "recorded_steps": [self._recorded[n] for n in sorted(self._recorded)][:DRIFT_SHOWN],
            "taken_steps": self._taken[:DRIFT_SHOWN],
        }
        await self._sink.flush()
        try:
            await send_until_taken(lambda: self._store.report_drift(self._lease, dumps(details)))
        except LeaseLost:
            raise self._lost("drift report") from None
        log.warning(
            "run drifted at step %d: it recorded %s, the handler asked for %s; parked for a "
            "person (version_drift)",
            position,
            recorded,
            taken,
            extra=self._log_extra(),
        )
        self._on_parked()
        raise VersionDrift(self._lease.run_id, details)

    def _check_started(self, started: EffectStart) -> None:
        if started.answer == EffectAnswer.UNKNOWN:
            record = started.record or {}
            log.warning(
                "effect %s started before and its outcome is unknown: "
                "the run is parked for a person",
                record.get("key"),
                extra=self._log_extra(),
            )
            self._on_parked()
            raise EffectOutcomeUnknown(self._lease.run_id, record)

    async def _record(
        self, call: EffectCall, outcome: EffectOutcome, result_json: str = ""
    ) -> None:
        # shielded: the side effect happened (or certainly did not); cancelling the run
        # now must not leave its outcome unknown
        await _shielded(self._write_outcome(call, outcome, result_json))

    async def _write_outcome(
        self, call: EffectCall, outcome: EffectOutcome, result_json: str
    ) -> None:
        await self._sink.flush()
        try:
            await send_until_taken(
                lambda: self._store.record_effect(self._lease, call, outcome, result_json)
            )
        except LeaseLost:
            # said here, in the shielded write: the caller may have been cancelled
            raise self._lost("effect result") from None

    def _encode_state(self, state: Any) -> str:
        try:
            payload = _to_json(state)
        except (TypeError, ValueError) as exc:
            raise InvalidCheckpoint(f"checkpoint state is not JSON-serialisable: {exc}") from exc
        size = len(payload.encode())
        if size > self._max_bytes:
            raise CheckpointTooLarge(size, self._max_bytes)
        return payload

    def _encode_result(self, call: EffectCall, value: Any) -> str:
        try:
            payload = _to_json(value)
        except (TypeError, ValueError) as exc:
            raise InvalidEffectResult(
                f"effect {call.key!r} returned a value that is not JSON-serialisable: {exc}",
                details={"key": call.key},
            ) from exc
        size = len(payload.encode())
        if size > self._max_bytes:
            raise InvalidEffectResult(
                f"effect {call.key!r} returned {size} bytes; the limit is {self._max_bytes} "
                "(LEASEHOLD_MAX_CHECKPOINT_BYTES)",
                details={"key": call.key, "size_bytes": size, "limit_bytes": self._max_bytes},
            )
        return payload

    def _lost(self, what: str) -> LeaseLost:
        log.warning("%s rejected: lease lost", what, extra=self._log_extra())
        self._on_lost()
        return LeaseLost(self._lease.run_id, self._lease.fence)

    def _log_extra(self) -> dict[str, Any]:
        lease = self._lease
        return {"run_id": lease.run_id, "owner_id": lease.owner_id, "fence": lease.fence}


async def _shielded(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` so that cancelling the caller does not cancel it.

    If the caller is cancelled first, nobody awaits the outcome: its error is
    consumed here (lease loss is logged where it happens) instead of surfacing as
    "Task exception was never retrieved".
    """
    task = asyncio.ensure_future(work)
    task.add_done_callback(_consume_error)
    return await asyncio.shield(task)


def _consume_error(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def send_until_taken(write: Callable[[], Awaitable[T]]) -> T:
    """Send a write until Redis takes it; each script takes a repeat of it as done.

    Retried while the refusal is transient (:func:`~app.store.redis.refusals.is_transient`:
    no answer, read-only during a failover, out of memory: a new effect waits for
    memory to free while the lease stays renewed); any other error is raised.
    """
    return await retrying(
        write,
        transient=is_transient,
        what="progress write",
        backoff=REDIS_BACKOFF,
        describe=describe,
        logger=log,
    )


async def _invoke(fn: EffectFn, key: str) -> Any:
    """Call an async ``fn`` on the loop and a sync one in a thread (it may block)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(key)
    result = await asyncio.to_thread(fn, key)
    if inspect.isawaitable(result):  # a lambda wrapping an async call
        return await result
    return result


def _to_json(value: Any) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return dumps(value)
