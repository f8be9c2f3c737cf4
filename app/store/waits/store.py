"""Durable waits: a handler parks its run (``park_run``), a client signals it (``signal_run``).

A wait is one *step* of the run, named ``<kind>:<name>:<ordinal>`` (kind ``sleep``,
``signal`` or ``human``; the ordinal counts the run's waits of that kind and name
from 1, as effects count theirs). Its record lives in the run's waits hash
(``…:waits:<id>``) with the deadline fixed by its first call, so a handler that is
run again from the top after the wake finds the step over and goes on: a sleep
returns, a signal returns its payload, a question returns its answer. Signals that
arrive before their wait are kept, in order, in the same hash (``inbox:<name>``),
bounded per run. Payloads stay JSON *text* end to end: Lua never re-encodes (or
re-rounds) a client's numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

from app.errors import IdempotencyConflict, RunNotFound, SignalInboxFull
from app.store.context import Store, StoreContext
from app.store.keys import queue_of
from app.store.leases.store import Lease
from app.store.lua.scripts import ScriptCode, Scripts
from app.store.redis.connection import AsyncRedis

if TYPE_CHECKING:
    from app.settings import Settings
from app.store.lua.transition import raise_for
from app.store.waits.bindings import PARK_RUN, SIGNAL_RUN, ParkArgs, SignalArgs


class WaitKind(StrEnum):
    """What a parked run waits for."""

    SLEEP = "sleep"
    SIGNAL = "signal"
    HUMAN = "human"


@dataclass(frozen=True)
class WaitCall:
    """One wait of a run: its step, and the deadline its first call sets.

    ``duration_ms`` counts from the Redis clock's now (``ctx.sleep``,
    ``wait_for_signal``'s timeout); ``at_ms`` is an epoch ms (``ctx.sleep_until``);
    a question has neither and carries ``question_json``.
    """

    run_id: str
    kind: WaitKind
    name: str
    ordinal: int
    duration_ms: int | None = None
    at_ms: int | None = None
    question_json: str = ""
    # its place among the run's steps (the drift check's record); None: not noted
    position: int | None = None

    @property
    def step(self) -> str:
        """Its field in the run's waits hash."""
        return f"{self.kind.value}:{self.name}:{self.ordinal}"


class WaitOutcome(StrEnum):
    """What became of a wait when its handler reached it."""

    PARKED = "parked"  # the run is parked: its lease is gone, the handler must unwind
    OVER = "over"  # the sleep ended, the signal came, the question was answered
    TIMED_OUT = "timed_out"  # the signal did not come by its deadline
    CANCELLING = "cancelling"  # a client is cancelling the run: it was not parked
    FULL = "full"  # a new step past the run's bound of waits: nothing written


@dataclass(frozen=True)
class WaitAnswer:
    """What park_run answered: ``payload_json`` for OVER ('' for a sleep), ``until_ms``."""

    outcome: WaitOutcome
    payload_json: str = ""
    until_ms: int | None = None


_OUTCOMES = {
    ScriptCode.OK: WaitOutcome.PARKED,
    ScriptCode.REPLAYED: WaitOutcome.OVER,
    ScriptCode.TIMEOUT: WaitOutcome.TIMED_OUT,
    ScriptCode.CANCEL: WaitOutcome.CANCELLING,
    ScriptCode.FULL: WaitOutcome.FULL,
}


class SignalDelivery(StrEnum):
    """What became of a signal: it woke its wait, or waits in the run's inbox."""

    DELIVERED = "delivered"
    BUFFERED = "buffered"


class WaitStore(Store):
    """Parks runs (the executor) and delivers signals to them (the API), on one context."""

    def __init__(self, ctx: StoreContext, *, max_waits: int = 10_000) -> None:
        super().__init__(ctx)
        # fields a run's waits hash may hold (steps and inbox): LEASEHOLD_MAX_WAITS_PER_RUN
        self.max_waits = max_waits

    @classmethod
    def for_settings(cls, client: AsyncRedis, scripts: Scripts, settings: Settings) -> WaitStore:
        """The store of ``settings``: their context and ``max_waits_per_run``."""
        ctx = StoreContext.for_settings(client, scripts, settings)
        return cls(ctx, max_waits=settings.max_waits_per_run)

    async def park(self, lease: Lease, call: WaitCall) -> WaitAnswer:
        """Park the run on ``call`` (fenced), or find the wait over; see :class:`WaitOutcome`.

        Raises :class:`~app.errors.LeaseLost` when fenced out (nothing written).
        """
        args = ParkArgs(
            owner_id=lease.owner_id,
            fence=lease.fence,
            run_id=lease.run_id,
            kind=call.kind.value,
            ordinal=call.ordinal,
            name=call.name,
            duration_ms="" if call.duration_ms is None else call.duration_ms,
            at_ms="" if call.at_ms is None else call.at_ms,
            question=call.question_json,
            maxlen=self.events_maxlen,
            wake_channel=self.keys(lease.queue).wake_channel,
            max_waits=self.max_waits,
            position="" if call.position is None else call.position,
        )
        keys = self.keys(lease.queue)
        code, value = await PARK_RUN.send(self.scripts, self.client, keys, args)
        raise_for(code, run_id=lease.run_id, fence=lease.fence)
        outcome = _OUTCOMES[ScriptCode(code)]
        if outcome == WaitOutcome.OVER:
            return WaitAnswer(outcome, payload_json=value)
        if outcome == WaitOutcome.FULL:
            return WaitAnswer(outcome)
        return WaitAnswer(outcome, until_ms=int(float(value)) if value else None)

    async def signal(
        self, run_id: str, name: str, payload_json: str, *, max_pending: int, signal_id: str = ""
    ) -> tuple[SignalDelivery, bool]:
        """Send signal ``name`` to a run: wake the wait for it, or keep it in the inbox.

        Returns what became of it and whether that was a replay: ``signal_id`` (a
        client's idempotency key, '' for none) seen before answers what the first
        signal with it did, writing nothing. Raises :class:`RunNotFound`,
        :class:`InvalidTransition` (the run finished or is being cancelled: no wait can
        take it), :class:`SignalInboxFull` and :class:`IdempotencyConflict` (the key
        came with another name or payload).
        """
        queue = queue_of(run_id)
        if queue is None:
            raise RunNotFound(run_id)
        keys = self.keys(queue)
        args = SignalArgs(
            run_id=run_id,
            name=name,
            payload=payload_json,
            max_pending=max_pending,
            maxlen=self.events_maxlen,
            wake_channel=keys.wake_channel,
            signal_id=signal_id,
            max_waits=self.max_waits,
        )
        code, value = await SIGNAL_RUN.send(self.scripts, self.client, keys, args)
        raise_for(code, run_id=run_id, status=value, action="signal")
        if code == ScriptCode.FULL:
            raise SignalInboxFull(run_id, int(value) if value.isdigit() else None)
        if code == ScriptCode.CONFLICT:
            raise IdempotencyConflict(signal_id, run_id)
        return SignalDelivery(value), code == ScriptCode.REPLAYED

    async def waits(self, queue: str, run_id: str) -> dict[str, Any]:
        """A run's wait records by step and its inbox, decoded (for inspection and tests)."""
        raw = cast(dict[str, str], await self.client.hgetall(self.keys(queue).waits(run_id)))
        return {field: json.loads(value) for field, value in raw.items()}
