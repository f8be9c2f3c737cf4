"""Operation leases: supervise one model call or tool call without a killing deadline.

An :class:`Operation` watches work that is already running. When its lease
timer fires, *nothing is cancelled*: a ``wait`` event goes out, the watchdog is
asked, and its verdict is applied — RENEW re-arms the timer on the same
in-flight work (it is never restarted), NUDGE leaves a note for the handler's
next step, INTERVENE cancels the work and raises :class:`OperationIntervened`,
ESCALATE cancels it and raises :class:`EscalationRequested` (the run parks).

Budgets are separate knobs, each with its own typed, non-retryable error:
``first_progress_s`` (no first sign of life), ``idle_s`` (silence after the last
sign), ``max_duration_s`` (absolute, progress or not).

Stopping is cancellation of the work *and* of everything it started: tasks
created with :meth:`Operation.create_task` are cancelled and awaited before any
error propagates, whether the cause is a verdict, a budget, an exception in
the work, or the run's own cancellation. Cancellation of the run itself is
honoured at once; the watchdog is not asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from app.errors import (
    DurationExceeded,
    EscalationRequested,
    FirstProgressTimeout,
    IdleTimeout,
    LeaseholdError,
    OperationIntervened,
)
from app.supervision.verdicts import Decision, Evidence, Verdict
from app.supervision.watchdog import Watchdog
from app.telemetry.metrics import VERDICTS
from app.telemetry.tracing import tracer

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]
GAP_WINDOW = 50
MIN_EXPECTED_GAP_FRACTION = 0.1


@dataclass(frozen=True)
class OperationLimits:
    """The lease and budgets of one operation, in seconds (None: no such budget)."""

    lease_s: float
    first_progress_s: float | None = None
    idle_s: float | None = None
    max_duration_s: float | None = None


class Operation:
    """One supervised operation. Use it as ``async with ctx.operation(...) as op``."""

    def __init__(
        self,
        *,
        kind: str,
        subject: str,
        limits: OperationLimits,
        watchdog: Watchdog,
        emit: Emit,
        nudges: list[str],
        clock: Callable[[], float] = time.monotonic,
        before: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.kind = kind
        self.subject = subject
        self.limits = limits
        self._watchdog = watchdog
        self._emit = emit
        self._nudges = nudges
        self._clock = clock
        # awaited on entry before the lease and budgets start (a rate limit's token)
        self._before = before
        self.started_at = clock()
        self.renewals = 0
        self.progress_count = 0
        self._last_progress: float | None = None
        self._gaps: deque[float] = deque(maxlen=GAP_WINDOW)
        self._children: set[asyncio.Task[Any]] = set()
        self._failure: LeaseholdError | None = None
        self._target: asyncio.Task[Any] | None = None
        self._cancelling_before = 0
        self._watcher: asyncio.Task[None] | None = None
        self.verdicts: list[Decision] = []

    # -- what the work reports -------------------------------------------------------

    def progress(self, **data: Any) -> None:
        """Evidence of life (a token, a page, a heartbeat from a tool). Cheap; call often."""
        now = self._clock()
        if self._last_progress is not None:
            self._gaps.append(now - self._last_progress)
        self._last_progress = now
        self.progress_count += 1

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start a child task (a tool call launched mid-stream) that the operation owns.

        It is cancelled and awaited when the operation ends, however it ends.
        """
        task = asyncio.create_task(coro)
        self._children.add(task)
        task.add_done_callback(self._children.discard)
        return task

    @property
    def pending_children(self) -> int:
        """Children not finished yet (zero after the operation ends)."""
        return sum(1 for task in self._children if not task.done())

    @property
    def elapsed_s(self) -> float:
        """Seconds since the operation started."""
        return self._clock() - self.started_at

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Operation:
        if self._before is not None:
            await self._before()
            self.started_at = self._clock()  # waiting for a token counts against no budget
        # the span is current inside the block and in the watcher started below
        self._span = tracer().start_span(
            f"leasehold.operation {self.kind}",
            attributes={"leasehold.kind": self.kind, "leasehold.subject": self.subject},
        )
        self._scope = contextlib.ExitStack()
        self._scope.enter_context(tracer().use(self._span))
        self._target = asyncio.current_task()
        if self._target is not None:
            self._cancelling_before = self._target.cancelling()
        self._watcher = asyncio.create_task(self._watch(), name=f"watch:{self.kind}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        error = exc
        try:
            suppressed = await self._exit(exc_type)
            if suppressed:
                error = None
            return suppressed
        except BaseException as raised:
            error = raised
            raise
        finally:
            self._scope.close()
            if error is not None:
                self._span.fail(error)
            self._span.set_attributes(
                {"leasehold.renewals": self.renewals, "leasehold.progress": self.progress_count}
            )
            self._span.end()

    async def _exit(self, exc_type: type[BaseException] | None) -> bool:
        interrupted = False
        try:
            await self._stop_watcher()
        except asyncio.CancelledError:
            interrupted = True  # ours (a verdict landing late) or the run's: sorted out below
        await self._settle_children()
        if self._failure is None:
            if interrupted:
                raise asyncio.CancelledError
            return False
        if self._target is not None and self._target.uncancel() > self._cancelling_before:
            # the run itself was cancelled as well: that wins over any verdict or budget
            if exc_type is asyncio.CancelledError:
                return False
            raise asyncio.CancelledError
        raise self._failure from None

    async def _stop_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            (outcome,) = await asyncio.gather(self._watcher, return_exceptions=True)
            if isinstance(outcome, Exception):
                log.error(
                    "operation watcher crashed; %s %s ran unsupervised",
                    self.kind,
                    self.subject,
                    exc_info=outcome,
                )

    async def _settle_children(self) -> None:
        """Cancel every child and wait until each has really finished."""
        children = [task for task in self._children if not task.done()]
        for task in children:
            task.cancel()
        if children:
            await asyncio.gather(*children, return_exceptions=True)

    def _fail(self, failure: LeaseholdError) -> None:
        self._failure = failure
        if self._target is not None:
            self._target.cancel()

    # -- the watcher -----------------------------------------------------------------

    async def _watch(self) -> None:
        lease_deadline = self.started_at + self.limits.lease_s
        while True:
            now = self._clock()
            wake_at = min([lease_deadline, *self._budget_deadlines(), *self._idle_checks(now)])
            if wake_at > now:
                await asyncio.sleep(wake_at - now)
                continue
            budget_error = self._budget_error(now)
            if budget_error is not None:
                self._fail(budget_error)
                return
            if now >= lease_deadline:
                if not self._apply(await self._round(now)):
                    return
                lease_deadline = self._clock() + self.limits.lease_s

    async def _round(self, now: float) -> Decision:
        """One wait/verdict round; a failure of the round itself means RENEW, loudly."""
        try:
            return await self._consult(now)
        except Exception as exc:  # supervision must not die silently under a hung operation
            log.exception("watchdog round failed for %s %s; renewing", self.kind, self.subject)
            return Decision(Verdict.RENEW, f"watchdog round failed: {type(exc).__name__}")

    def _budget_deadlines(self) -> list[float]:
        limits, deadlines = self.limits, []
        if limits.max_duration_s is not None:
            deadlines.append(self.started_at + limits.max_duration_s)
        if self._last_progress is None and limits.first_progress_s is not None:
            deadlines.append(self.started_at + limits.first_progress_s)
        if self._last_progress is not None and limits.idle_s is not None:
            deadlines.append(self._last_progress + limits.idle_s)
        return deadlines

    def _idle_checks(self, now: float) -> list[float]:
        """Before the first progress, look again every ``idle_s``: idle counts from it.

        The watcher sleeps until its next deadline, and the first progress sets no
        timer; without these looks an ``idle_s`` far shorter than the lease would be
        noticed only when the lease fires. A look at most ``idle_s`` after the first
        progress still finds that progress's idle deadline ahead, so it fires on time.
        """
        if self._last_progress is None and self.limits.idle_s is not None:
            return [now + self.limits.idle_s]
        return []

    def _budget_error(self, now: float) -> LeaseholdError | None:
        limits, elapsed = self.limits, now - self.started_at
        details = {"kind": self.kind, "subject": self.subject, "elapsed_s": round(elapsed, 3)}
        if limits.max_duration_s is not None and elapsed >= limits.max_duration_s:
            return DurationExceeded(
                f"{self.kind} {self.subject} ran {elapsed:.1f}s, over "
                f"max_duration_s={limits.max_duration_s}",
                details=details,
            )
        if (
            self._last_progress is None
            and limits.first_progress_s is not None
            and elapsed >= limits.first_progress_s
        ):
            return FirstProgressTimeout(
                f"{self.kind} {self.subject} showed no progress within "
                f"first_progress_s={limits.first_progress_s}",
                details=details,
            )
        if (
            self._last_progress is not None
            and limits.idle_s is not None
            and now - self._last_progress >= limits.idle_s
        ):
            return IdleTimeout(
                f"{self.kind} {self.subject} was silent for "
                f"{now - self._last_progress:.1f}s, over idle_s={limits.idle_s}",
                details=details,
            )
        return None

    def evidence(self, now: float) -> Evidence:
        """What the watchdog gets to see right now."""
        since = now - (self._last_progress if self._last_progress is not None else self.started_at)
        return Evidence(
            kind=self.kind,
            subject=self.subject,
            lease_s=self.limits.lease_s,
            elapsed_s=now - self.started_at,
            renewals=self.renewals,
            progress_count=self.progress_count,
            since_progress_s=None if self._last_progress is None else since,
            progressed_last_period=(
                self._last_progress is not None and since <= self.limits.lease_s
            ),
            suspicion=since / (self._expected_gap() * math.log(10)),
            extra={
                "first_progress_s": self.limits.first_progress_s,
                "idle_s": self.limits.idle_s,
                "max_duration_s": self.limits.max_duration_s,
            },
        )

    def _expected_gap(self) -> float:
        """How long a silence is normal for this operation (phi-accrual's mean)."""
        floor = self.limits.lease_s * MIN_EXPECTED_GAP_FRACTION
        if self._gaps:
            return max(floor, sum(self._gaps) / len(self._gaps))
        if self._last_progress is None and self.limits.first_progress_s is not None:
            return self.limits.first_progress_s  # a reasoning model may think for minutes
        return self.limits.lease_s

    async def _consult(self, now: float) -> Decision:
        evidence = self.evidence(now)
        self._span.add_event("wait", {"leasehold.renewals": self.renewals})
        await self._emit(
            "wait",
            {
                "kind": self.kind,
                "subject": self.subject,
                "elapsed_s": round(evidence.elapsed_s, 3),
                "renewals": self.renewals,
                "lease_s": self.limits.lease_s,
                "since_progress_s": (
                    round(evidence.since_progress_s, 3)
                    if evidence.since_progress_s is not None
                    else None
                ),
            },
        )
        decision = await self._watchdog.decide(evidence)
        self.verdicts.append(decision)
        VERDICTS.labels(decision.verdict.value, self.kind).inc()
        self._span.add_event(
            "verdict",
            {
                "leasehold.verdict": decision.verdict.value,
                "leasehold.reason": decision.reason or "",
                "leasehold.evaluator": decision.evaluator or "",
            },
        )
        await self._emit(
            "verdict",
            {
                "verdict": decision.verdict.value,
                "reason": decision.reason,
                "evaluator": decision.evaluator,
                "renewals": self.renewals,
                "kind": self.kind,
                "subject": self.subject,
                "note": decision.note,
                "evidence": evidence.as_dict(),
            },
        )
        return decision

    def _apply(self, decision: Decision) -> bool:
        """Apply a verdict; False when the operation is being stopped."""
        if decision.verdict in (Verdict.RENEW, Verdict.NUDGE):
            if decision.verdict == Verdict.NUDGE:
                self._nudges.append(
                    decision.note
                    or f"{self.kind} {self.subject} has been silent for a while: {decision.reason}"
                )
            self.renewals += 1
            return True
        evidence = self.evidence(self._clock()).as_dict()
        if decision.verdict == Verdict.ESCALATE:
            self._fail(EscalationRequested(decision.reason, evidence=evidence))
        else:
            self._fail(
                OperationIntervened(
                    f"watchdog intervened in {self.kind} {self.subject}: {decision.reason}",
                    details={"evaluator": decision.evaluator, "evidence": evidence},
                )
            )
        return False


async def run_supervised(operation: Operation, work: Any) -> Any:
    """Run ``work`` once, in its own task, under ``operation``; return its result.

    ``work`` is an awaitable, an async function taking the operation (to report
    progress), or a sync function taking it (run in a thread; a thread cannot be
    interrupted, so intervening stops waiting for it, not the thread itself).
    """
    async with operation:
        return await operation.create_task(_as_coroutine(operation, work))


async def _as_coroutine(operation: Operation, work: Any) -> Any:
    if inspect.isawaitable(work):
        return await work
    if inspect.iscoroutinefunction(work):
        return await work(operation)
    result = await asyncio.to_thread(work, operation)
    if inspect.isawaitable(result):
        return await result
    return result
