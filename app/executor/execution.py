"""One claimed run's life inside a worker: execute, then finish, release or abandon.

``RunExecution.run`` is split along the three ways a run can leave a worker:

* ``_finish``: the handler returned, raised, or stopped after a client's cancel:
  its outcome goes to the courier, which writes it (shielded, retried, fenced);
* ``_release``: the worker is draining and the handler was interrupted: the run
  goes back to the queue with fence+1 so another worker takes it at once;
* abandon: the lease is lost (LOST from Redis, or jeopardy), or the run was
  parked in ``reconciliation_required`` because an effect's outcome is unknown:
  nothing is written, because nothing this owner writes would be accepted, or
  correct.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import BaseModel
from redis.exceptions import RedisError

from app.errors import (
    BudgetExceeded,
    DurationExceeded,
    EscalationRequested,
    HandlerFailed,
    InvalidInput,
    RateLimitRelease,
    RunFailure,
    VersionDrift,
)
from app.executor.context import HelperDeps, RunContext, RunHelpers
from app.executor.courier import Courier
from app.executor.reasons import RunParked, StopReason
from app.executor.slots import RunGate
from app.executor.spans import attempt_span
from app.executor.tally import Tally
from app.handlers import HandlerSpec
from app.models import RunStatus
from app.retry import Backoff
from app.store.codec import dumps
from app.store.leases.store import ClaimedRun, Outcome
from app.store.lua.transition import LeaseAnswer
from app.telemetry.metrics import ATTEMPT_SECONDS, BUDGET_FAILURES, RUNS_FINISHED, child
from app.telemetry.tracing import NO_SPAN, tracer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed run runs again: the one backoff (:mod:`app.retry`), with equal jitter.

    Each delay is in [d/2, d], d doubling from ``backoff_s`` up to ``backoff_max_s``:
    half of it is kept, so a failed run is never retried at once; the other half
    is jittered, so runs that failed together are not retried together.
    """

    backoff_s: float
    backoff_max_s: float

    def delay_ms(self, attempt: int) -> int:
        """Delay before attempt ``attempt + 1``, in ms."""
        backoff = Backoff(first_s=self.backoff_s, max_s=self.backoff_max_s, floor=0.5)
        return int(backoff.delay_s(attempt) * 1000)

    def for_handler(self, spec: HandlerSpec | None) -> RetryPolicy:
        """This policy with the handler's own backoff defaults, where it names them.

        The handler's default wins over the deployment's setting (this policy); a
        run's request has no backoff option, so nothing wins over the handler's.
        """
        if spec is None:
            return self
        own = spec.defaults
        return RetryPolicy(
            self.backoff_s if own.retry_backoff_s is None else own.retry_backoff_s,
            self.backoff_max_s if own.retry_backoff_max_s is None else own.retry_backoff_max_s,
        )


@dataclass(frozen=True)
class ExecutionDeps:
    """What an execution needs from its worker."""

    helpers: HelperDeps
    courier_for: Callable[[str], Courier]
    thread_pool: Executor
    retry: RetryPolicy
    # the run left its slot after holding it this many seconds (None: it never started)
    on_slot_freed: Callable[[float | None], None]
    # at most the worker's concurrency of runs execute at once; prefetched ones wait here
    run_gate: RunGate
    on_settled: Callable[[str], None]
    # the worker's per-run metrics, added to Prometheus once per loop pass
    tally: Tally = field(default_factory=Tally)


@dataclass(slots=True)
class HandlerResult:
    """How the handler call ended: a value, an error, or an interruption.

    Read-only by convention: one is made per run, and a frozen dataclass sets each
    field through ``object.__setattr__``.
    """

    value: Any = None
    error: BaseException | None = None
    interrupted: bool = False


class RunExecution:
    """Executes one claimed run and settles it exactly one way."""

    def __init__(self, claimed: ClaimedRun, spec: HandlerSpec | None, deps: ExecutionDeps) -> None:
        self.claimed = claimed
        self._spec = spec
        self._deps = deps
        self._loop = asyncio.get_running_loop()
        self.span = attempt_span(claimed, claimed.lease.owner_id)
        # the handler's context, held weakly (see start); none before the run starts
        self._context: Callable[[], RunContext | None] = _no_context
        self.stop_reason: StopReason | None = None
        self._in_handler = False
        self._waiting_for_slot = False
        self.started = False  # it took a run slot (a prefetched run waits for one first)
        self.task: asyncio.Task[None] | None = None
        self._started_at = time.monotonic()

    def start(self) -> asyncio.Task[None]:
        """Run in a task of its own, which owns the run's helpers and context.

        They are the task's coroutine's arguments, not this object's attributes: the
        helpers call back into the execution (``stop``, ``interrupt``), and with both
        directions held every run was a reference cycle of 12 objects (execution,
        helpers, context, task, claim...) that only the cyclic collector could free:
        ~400 young and 35 middle-generation passes per 20,000 no-op runs, 7-10 µs of
        the worker's CPU per run (BENCHMARKS.md, issue 19 aim 1). Now a settled run is
        freed by reference counting as its task ends. The execution reaches the context
        through a weak reference: a context nobody holds any more has nobody to tell.
        """
        helpers = RunHelpers(
            self.claimed,
            self._deps.helpers,
            stop=self.stop,
            interrupt=self.interrupt,
            trace_parent=self.span.traceparent,
        )
        context = RunContext(self.claimed, helpers=helpers, loop=self._loop)
        self._context = weakref.ref(context)
        if self.stop_reason is not None:  # stopped before it started
            context._signal_cancel(self.stop_reason)
        # the loop's own create_task names the task as it builds it (asyncio.create_task
        # sets the name afterwards, in Python: ~2 % of a worker's CPU at no-op runs)
        # tracing off, no span to make current or end: the task runs _run, one coroutine
        # frame fewer to create, and to resume at each step
        coro = self._run(helpers, context) if self.span is NO_SPAN else self.run(helpers, context)
        self.task = self._loop.create_task(coro, name=f"run:{self.claimed.id}")
        return self.task

    @property
    def abandoned(self) -> bool:
        """True when this owner must write nothing more for the run."""
        return self.stop_reason is not None and self.stop_reason.abandons

    def stop(self, reason: StopReason) -> None:
        """Interrupt the handler. Lease loss wins over any other reason."""
        if self.stop_reason is None or reason.abandons:
            self.stop_reason = reason
        self.span.add_event(reason)
        self._signal_cancel(reason)
        if (self._in_handler or self._waiting_for_slot) and self.task is not None:
            self.task.cancel()

    def interrupt(self, reason: StopReason) -> None:
        """Stop from inside the handler's own call, which then unwinds by raising.

        A durable wait that parked the run (or found it cancelling) raises
        :class:`RunParked` itself, so the task is not cancelled (a cancel requested from
        inside the task would hit the settling that follows).
        """
        if self.stop_reason is None or reason.abandons:
            self.stop_reason = reason
        self.span.add_event(reason)
        self._signal_cancel(reason)

    def _signal_cancel(self, reason: StopReason) -> None:
        """Tell the handler, through its context, while anyone still holds that context."""
        context = self._context()
        if context is not None:
            context._signal_cancel(reason)

    async def run(self, helpers: RunHelpers, context: RunContext) -> None:
        """Execute the handler, then settle the run one way, inside the attempt's span."""
        try:
            if self.span is NO_SPAN:  # tracing off: no span to make current
                await self._run(helpers, context)
            else:
                with tracer().use(self.span):
                    await self._run(helpers, context)
        finally:
            self.span.end()

    async def _run(self, helpers: RunHelpers, context: RunContext) -> None:
        try:
            result = await self._execute_in_slot(context)
            if result.error is None and not result.interrupted:
                result = await self._checked_end(helpers, result)
            if self.stop_reason is not None and await self._settled_by_stop(result):
                return
            if isinstance(result.error, RateLimitRelease):
                # the wait event must land before the release moves the fence past us
                await helpers.flush_events()
                await self._release(result.error.reason, delay_ms=result.error.delay_ms)
                return
            await self._finish(result, helpers)
        finally:
            self._deps.on_settled(self.claimed.id)

    async def _checked_end(self, helpers: RunHelpers, result: HandlerResult) -> HandlerResult:
        """The handler returned: the run's recorded steps must all have been asked for
        (a step the code it met dropped at its end is drift: the run parks)."""
        try:
            await helpers.check_steps_taken()
        except VersionDrift as drift:
            return HandlerResult(error=drift)
        return result

    async def _settled_by_stop(self, result: HandlerResult) -> bool:
        """Settle a stopped run that writes no outcome: parked, abandoned or drained."""
        if self.stop_reason == StopReason.PARKED:
            log.debug("run parked: its lease is given back", extra=self._log_extra())
            return True
        if self.abandoned:
            log.warning(
                "run stopped without writing: %s", self.stop_reason, extra=self._log_extra()
            )
            return True
        if result.interrupted and self.stop_reason == StopReason.DRAIN:
            await self._release()
            return True
        return False

    async def _execute_in_slot(self, context: RunContext) -> HandlerResult:
        """Wait for a run slot (a prefetched run), execute, then give the slot back.

        A run stopped while it waits never starts: a drain releases it, a cancel
        ends it cancelled, a lost lease abandons it, as if it had been interrupted.
        """
        gate = self._deps.run_gate
        # a free slot is taken without a coroutine (the common case: no prefetch window)
        if self.stop_reason is None and gate.try_enter():
            interrupted = None
        else:
            interrupted = await self._wait_for_slot(gate)
        if interrupted is not None:
            self._deps.on_slot_freed(None)
            return interrupted
        self.started = True
        took_at = time.monotonic()
        try:
            return await self._execute(context)
        finally:
            gate.leave()
            self._deps.on_slot_freed(time.monotonic() - took_at)

    async def _wait_for_slot(self, gate: RunGate) -> HandlerResult | None:
        """Wait for a slot of ``gate`` (none was free); an interrupted result instead when
        the run is stopped first."""
        if self.stop_reason is not None:
            return HandlerResult(interrupted=True)
        self._waiting_for_slot = True
        try:
            await gate.enter()
        except asyncio.CancelledError:
            return self._interrupted_by_stop()
        finally:
            self._waiting_for_slot = False
        if self.stop_reason is not None:  # stopped as the slot came: it never starts
            gate.leave()
            return HandlerResult(interrupted=True)
        return None

    def _interrupted_by_stop(self) -> HandlerResult:
        """The run's task was cancelled: by :meth:`stop` (interrupted), else re-raised."""
        if self.stop_reason is None:
            raise asyncio.CancelledError  # not ours: the worker itself is being torn down
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return HandlerResult(interrupted=True)

    async def _execute(self, context: RunContext) -> HandlerResult:
        if self._spec is None:
            return HandlerResult(
                error=RunFailure(
                    f"no handler {self.claimed.handler!r} is registered in this worker",
                    code="unknown_handler",
                )
            )
        try:
            params = self._spec.parse_input(self.claimed.input)
        except InvalidInput as exc:
            return HandlerResult(
                error=RunFailure(str(exc), code="invalid_input", details={"errors": exc.problems})
            )
        self._in_handler = True
        deadline = self._arm_run_duration()
        try:
            return HandlerResult(value=await self._call(self._spec, params, context))
        except asyncio.CancelledError:
            return self._interrupted_by_stop()
        except RunParked:
            return HandlerResult(interrupted=True)
        except Exception as exc:
            return HandlerResult(error=exc)
        finally:
            self._in_handler = False
            if deadline is not None:
                deadline.cancel()

    def _arm_run_duration(self) -> asyncio.TimerHandle | None:
        """Enforce the run-level ``max_duration_s`` budget of this attempt, if any."""
        limit = self.claimed.budget.get("max_duration_s")
        if limit is None:
            return None
        return self._loop.call_later(float(limit), self.stop, StopReason.RUN_DURATION)

    def _call(self, spec: HandlerSpec, params: BaseModel, context: RunContext) -> Awaitable[Any]:
        """The handler's call to await: its coroutine, or its thread's future (a plain
        function, not a coroutine wrapping either: one frame fewer per run)."""
        if spec.is_async:
            return cast(Awaitable[Any], spec.fn(context, params))
        # the thread runs in a copy of this task's context: the handler's logs and spans
        # see the attempt's span
        call = functools.partial(contextvars.copy_context().run, spec.fn, context, params)
        return self._loop.run_in_executor(self._deps.thread_pool, call)

    async def _finish(self, result: HandlerResult, helpers: RunHelpers) -> None:
        if helpers.emitted:
            await helpers.flush_events()
        if self.abandoned:
            return
        outcome = self._outcome(result)
        code = await self._deps.courier_for(self.claimed.queue).finish(outcome)
        status = _status_after(outcome, code)
        if self.span is NO_SPAN:  # no exemplar to keep: counted with the batch's other runs
            claimed = self.claimed
            seconds = time.monotonic() - self._started_at
            self._deps.tally.finished(claimed.queue, claimed.handler, status, seconds)
        else:
            self._observe(status)
        if helpers.spawned and code in (LeaseAnswer.OK, LeaseAnswer.CANCEL):
            await helpers.settle_family()  # a parent's cascade, at once
        if code == LeaseAnswer.LOST:
            log.warning(
                "outcome rejected: lease lost before the terminal write", extra=self._log_extra()
            )
        elif log.isEnabledFor(logging.DEBUG):
            # DEBUG: at thousands of runs a second, a line per run costs more than the run
            log.debug(
                "run %s",
                "requeued for retry" if code == LeaseAnswer.RETRY else status,
                extra=self._log_extra(),
            )

    def _observe(self, status: str) -> None:
        """Tracing on: the outcome, and the attempt's duration with its trace id as the
        exemplar, so a slow bucket leads to it."""
        self.span.set_attributes({"leasehold.outcome": status})
        ids = tracer().current_ids()
        exemplar = {"trace_id": ids["trace_id"]} if ids else None
        child(RUNS_FINISHED, self.claimed.queue, self.claimed.handler, status).inc()
        child(ATTEMPT_SECONDS, self.claimed.queue, self.claimed.handler, status).observe(
            time.monotonic() - self._started_at, exemplar=exemplar
        )

    def _outcome(self, result: HandlerResult) -> Outcome:
        lease = self.claimed.lease
        if result.interrupted and self.stop_reason == StopReason.RUN_DURATION:
            limit = self.claimed.budget.get("max_duration_s")
            result = HandlerResult(
                error=DurationExceeded(
                    f"the run took longer than its max_duration_s={limit}",
                    details={"max_duration_s": limit},
                )
            )
        elif result.interrupted:
            return Outcome(lease, RunStatus.CANCELLED)
        if isinstance(result.error, EscalationRequested):
            escalation = {"reason": result.error.reason, "evidence": result.error.evidence}
            return Outcome(lease, RunStatus.WAITING_HUMAN, output_json=dumps(escalation))
        if result.error is None:
            try:
                output = _encode_output(result.value)
                return Outcome(lease, RunStatus.SUCCEEDED, output_json=output)
            except (TypeError, ValueError) as exc:
                result = HandlerResult(
                    error=RunFailure(
                        f"handler output is not JSON-serialisable: {exc}",
                        code="output_not_serializable",
                    )
                )
        failure = _as_failure(result.error)
        if isinstance(failure, BudgetExceeded):
            BUDGET_FAILURES.labels(failure.code).inc()
        delay = -1
        if failure.retryable and self.claimed.attempt < self.claimed.max_attempts:
            delay = self._deps.retry.for_handler(self._spec).delay_ms(self.claimed.attempt)
        error = {
            "code": failure.code,
            "message": failure.message,
            "retryable": failure.retryable,
            "details": failure.details,
        }
        return Outcome(lease, RunStatus.FAILED, error_json=dumps(error), retry_delay_ms=delay)

    async def _release(self, reason: str = StopReason.DRAIN, *, delay_ms: int = 0) -> None:
        """Hand the run back (fence+1, attempt kept): at once for a drain, later for a rate."""
        try:
            codes = await self._deps.helpers.lease_store.release(
                [self.claimed.lease], reason, delay_ms=delay_ms
            )
        except (RedisError, OSError) as exc:
            log.warning(
                "release failed; the lease will expire instead: %s", exc, extra=self._log_extra()
            )
            return
        self.span.add_event("released", {"leasehold.code": str(codes[0])})
        log.info("run released (%s): %s", reason, codes[0], extra=self._log_extra())

    def _log_extra(self) -> dict[str, Any]:
        lease = self.claimed.lease
        return {"run_id": lease.run_id, "owner_id": lease.owner_id, "fence": lease.fence}


def _no_context() -> RunContext | None:
    return None


def _status_after(outcome: Outcome, code: LeaseAnswer) -> str:
    """The run's status once Redis answered ``code`` to ``outcome``, for the metrics."""
    if code is LeaseAnswer.OK:
        return outcome.status
    if code is LeaseAnswer.CANCEL:
        # the client's cancel came first, so a retry or escalation ended cancelled
        return RunStatus.CANCELLED
    return code.value.lower()


def _as_failure(error: BaseException | None) -> RunFailure:
    if isinstance(error, RunFailure):
        return error
    name = type(error).__name__
    return HandlerFailed(f"{name}: {error}", details={"exception": name})


def _encode_output(value: Any) -> str:
    if value is None:  # a handler that returns nothing (most): no encoder call
        return "null"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return dumps(value)
