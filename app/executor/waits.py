"""Durable waits: ``ctx.sleep``, ``ctx.sleep_until``, ``ctx.wait_for_signal``, ``ctx.ask_human``.

A wait **parks** the run instead of holding a worker: one fenced script
(``park_run``) records the wait, gives the lease back (fence+1, so this owner can
write nothing more), sets the run ``waiting`` (``waiting_human`` for a question)
and appends a ``wait`` event saying what for and until when. The handler is then
unwound (:class:`RunParked`, which ``except Exception`` does not catch) and the
worker's slot is free. The run wakes through the delayed set when its time comes
(the claim path retries use), or when ``POST /runs/{id}/signals/{name}`` delivers
its signal, or when a person resumes it; a worker claims it with fence+1 and calls
the handler again **from the top**, with its last checkpoint in ``ctx.state``.

The replay model, as effects have it: every wait is a step numbered per kind and
name (``sleep:<name>:<n>``, ``signal:<name>:<n>``, ``human:<name>:<n>``), the counts
saved with every checkpoint. On the run again, the handler meets its earlier
waits in order and each returns at once with its recorded outcome (the sleep is
over, the signal's payload, the person's answer), as recorded effects return
their results; the first wait not over parks the run again, keeping the deadline
its first call set (a sleep of an hour does not restart when a worker dies). So
work between waits must be replay-safe: wrap side effects in ``ctx.effect`` and
skip finished work with ``ctx.checkpoint``, exactly as for a retry.

Signals sent before their wait are kept in the run's inbox in order (at most
LEASEHOLD_MAX_PENDING_SIGNALS) and the next ``wait_for_signal`` of that name takes
the oldest at once; the inbox is checked in the same script that would park, so
no signal slips between the check and the park.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.errors import InvalidWait, LeaseLost, SignalTimeout
from app.executor.effects import EffectLedger, send_until_taken
from app.executor.events import EventSink
from app.executor.reasons import RunParked, StopReason
from app.models import WAIT_NAME
from app.store.leases.store import Lease
from app.store.waits.store import WaitAnswer, WaitCall, WaitKind, WaitOutcome, WaitStore

log = logging.getLogger(__name__)


class Waits:
    """The durable waits of one run, made as one owner at one fence."""

    def __init__(
        self,
        store: WaitStore,
        lease: Lease,
        *,
        ledger: EffectLedger,
        sink: EventSink,
        max_wait_s: float,
        max_question_bytes: int,
        on_stop: Callable[[StopReason], None],
    ) -> None:
        self._store = store
        self._lease = lease
        self._ledger = ledger
        self._sink = sink
        self._max_wait_s = max_wait_s
        self._max_question_bytes = max_question_bytes
        self._on_stop = on_stop

    async def sleep(self, seconds: float, *, name: str) -> None:
        """Park the run for ``seconds`` (Redis clock); see the module docstring."""
        duration_ms = self._duration_ms(seconds, "seconds")
        call = await self._call(WaitKind.SLEEP, name, duration_ms=duration_ms)
        await self._wait(call)

    async def sleep_until(self, when: datetime | float, *, name: str) -> None:
        """Park the run until ``when`` (an aware datetime, or epoch seconds)."""
        at_ms = self._at_ms(when)
        await self._wait(await self._call(WaitKind.SLEEP, name, at_ms=at_ms))

    async def signal(self, name: str, *, timeout_s: float | None) -> Any:
        """Park the run until signal ``name`` comes; return its payload.

        Raises :class:`SignalTimeout` once ``timeout_s`` passed without it.
        """
        duration_ms = None if timeout_s is None else self._duration_ms(timeout_s, "timeout_s")
        call = await self._call(WaitKind.SIGNAL, name, duration_ms=duration_ms)
        answer = await self._wait(call)
        if answer.outcome == WaitOutcome.TIMED_OUT:
            raise SignalTimeout(
                f"no signal {name!r} came within timeout_s={timeout_s}",
                details={"name": name, "step": call.step, "until_ms": answer.until_ms},
            )
        return json.loads(answer.payload_json)

    async def ask(self, question: Any, *, name: str) -> Any:
        """Park the run in ``waiting_human`` with ``question``; return the person's answer."""
        try:
            question_json = json.dumps(question, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidWait(f"the question is not JSON: {exc}") from exc
        size = len(question_json.encode())
        if size > self._max_question_bytes:
            raise InvalidWait(
                f"the question is {size} bytes; an event may hold {self._max_question_bytes} "
                "(LEASEHOLD_MAX_EVENT_BYTES)",
                details={"size_bytes": size, "limit_bytes": self._max_question_bytes},
            )
        call = await self._call(WaitKind.HUMAN, name, question_json=question_json)
        answer = await self._wait(call)
        return json.loads(answer.payload_json) if answer.payload_json else None

    async def _call(self, kind: WaitKind, name: str, **deadline: Any) -> WaitCall:
        if not isinstance(name, str) or not WAIT_NAME.fullmatch(name):
            raise InvalidWait(
                f"wait name {name!r} must match {WAIT_NAME.pattern}", details={"name": repr(name)}
            )
        ordinal, position = await self._ledger.next_step(f"{kind.value}:{name}", "w")
        return WaitCall(self._lease.run_id, kind, name, ordinal, **deadline, position=position)

    async def _wait(self, call: WaitCall) -> WaitAnswer:
        """Park on ``call``, or return the answer of a wait that is over."""
        await self._sink.flush()  # what the handler emitted before the wait comes first
        try:
            # park_run resent after a lost reply answers LOST: the run is parked either way
            answer = await send_until_taken(lambda: self._store.park(self._lease, call))
        except LeaseLost:
            log.warning("wait rejected: lease lost", extra=self._log_extra())
            self._on_stop(StopReason.LEASE_LOST)
            raise
        if answer.outcome in (WaitOutcome.OVER, WaitOutcome.TIMED_OUT):
            return answer
        if answer.outcome == WaitOutcome.FULL:
            raise InvalidWait(
                f"the run already holds {self._store.max_waits} waits and signals "
                "(LEASEHOLD_MAX_WAITS_PER_RUN): a handler that waits in a loop should end and "
                "start a new run (e.g. from a schedule)",
                details={"step": call.step, "limit": self._store.max_waits},
            )
        if answer.outcome == WaitOutcome.CANCELLING:
            self._on_stop(StopReason.CANCEL_REQUESTED)
            raise RunParked(call.step)
        log.debug("run parked on %s", call.step, extra=self._log_extra())
        self._on_stop(StopReason.PARKED)
        raise RunParked(call.step)

    def _duration_ms(self, seconds: Any, what: str) -> int:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
            or seconds > self._max_wait_s
        ):
            raise InvalidWait(
                f"{what} must be a finite number of seconds from 0 to {self._max_wait_s:g} "
                f"(LEASEHOLD_MAX_WAIT_S); got {seconds!r}",
                details={what: repr(seconds)},
            )
        return math.ceil(seconds * 1000)

    def _at_ms(self, when: Any) -> int:
        if isinstance(when, datetime):
            if when.tzinfo is None:
                raise InvalidWait(
                    "sleep_until needs an aware datetime (with a time zone) or epoch seconds",
                    details={"when": repr(when)},
                )
            epoch_s: Any = when.timestamp()
        else:
            epoch_s = when
        if (
            isinstance(epoch_s, bool)
            or not isinstance(epoch_s, int | float)
            or not math.isfinite(epoch_s)
            or epoch_s < 0
            or epoch_s - time.time() > self._max_wait_s
        ):
            raise InvalidWait(
                f"sleep_until needs a time at most {self._max_wait_s:g} s ahead "
                f"(LEASEHOLD_MAX_WAIT_S); got {when!r}",
                details={"when": repr(when)},
            )
        return math.ceil(epoch_s * 1000)

    def _log_extra(self) -> dict[str, Any]:
        lease = self._lease
        return {"run_id": lease.run_id, "owner_id": lease.owner_id, "fence": lease.fence}
