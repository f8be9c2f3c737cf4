"""Every exception Leasehold raises, in one tree.

::

    LeaseholdError
    ├── ConfigurationError            a setting is invalid (the CLI exits 2)
    ├── StoreError                    Redis said no, or could not be reached
    │   ├── RunNotFound
    │   ├── InvalidTransition         e.g. cancel of a succeeded run
    │   ├── IdempotencyConflict       same key, different body
    │   ├── AlreadyRetried            a re-run of this run exists already
    │   ├── OperationNotFound         no bulk operation with this id (or it expired)
    │   ├── OperationConflict         the operation is finished, or another process drives it
    │   ├── SingletonConflict         on_conflict=reject: a run of the singleton key is live
    │   ├── LeaseLost                 fenced out: another owner holds the run now
    │   ├── QueueNotDeclared          a run on a queue nobody declared
    │   ├── QueueLimitReached         PUT /queues past LEASEHOLD_MAX_QUEUES
    │   ├── RateLimitsFull            PUT /rate-limits past LEASEHOLD_MAX_RATE_LIMITS
    │   ├── RateLimitNotDeclared      a rate-limit key no declaration covers
    │   ├── ScheduleNotFound          no schedule has this id
    │   ├── ScheduleConflict          the id exists, or the schedule changed meanwhile
    │   ├── ScheduleLimitReached      POST /schedules past LEASEHOLD_SCHEDULE_MAX
    │   ├── MemoryPressure            Redis memory is past the high-water mark: creates wait
    │   ├── SignalInboxFull           a run holds LEASEHOLD_MAX_PENDING_SIGNALS unread (429)
    │   └── EffectOutcomeUnknown      an effect started and was never recorded: the run
    │                                 is parked in reconciliation_required (its code is
    │                                 ``effect_outcome_unknown``)
    ├── HandlerError                  registry problems
    │   ├── UnknownHandler
    │   ├── InvalidInput              input fails the handler's model
    │   └── InvalidHandlerDefaults    @handler(...) was given defaults that cannot hold
    ├── InvalidEvent                  a handler emitted a reserved or malformed event
    │   └── EventTooLarge             ... or one over the configured size bound
    ├── EscalationRequested           the watchdog escalated: the run parks in waiting_human
    ├── CapacityExceeded              an API process's cap on streams is reached (503)
    ├── ApiError                      the API answered a client with an error status
    ├── RateLimitRelease              a handler gives its run back until a bucket lets it
    │                                 in (ctx.rate_limit / ctx.rate_limited): no attempt spent
    └── RunFailure                    why a run did not succeed; carried in ``run.error``
        ├── HandlerFailed             the handler raised something untyped
        ├── InvalidRateLimitUse       ctx.rate_limit cost outside 1..burst, bad Retry-After
        ├── InvalidCheckpoint         ctx.checkpoint() got state that is not JSON
        │   └── CheckpointTooLarge    ... or more than LEASEHOLD_MAX_CHECKPOINT_BYTES
        ├── InvalidEffect             ctx.effect() got a malformed name
        │   └── InvalidEffectResult   ... or its function returned what cannot be recorded
        ├── EffectNotApplied          an effect's function says it certainly did not happen
        ├── InvalidWait               ctx.sleep / wait_for_signal / ask_human got a bad
        │                             name, duration, time or question
        ├── SignalTimeout             ctx.wait_for_signal's timeout passed without the signal
        ├── SpawnRefused              ctx.spawn past LEASEHOLD_MAX_CHILDREN_PER_RUN or
        │                             LEASEHOLD_MAX_RUN_DEPTH, or of an unknown handler,
        │                             an undeclared queue, an input too large: nothing created
        ├── ChildFailed               ctx.join: a child failed, was cancelled or orphaned
        ├── JoinTimeout               ctx.join's timeout passed before its children ended
        ├── BudgetExceeded            a budget ran out (non-retryable by default)
        │   ├── FirstProgressTimeout  no first progress signal within first_progress_s
        │   ├── IdleTimeout           no progress signal for idle_s after the last one
        │   ├── DurationExceeded      an operation or the run passed max_duration_s
        │   └── BudgetExhausted       the run used max_steps (and its extensions)
        ├── OperationIntervened       the watchdog stopped an operation (INTERVENE)
        │   (the four below are written by Redis scripts, never raised)
        ├── LeaseExpired              its executor's lease ran out, no retry: ``orphaned``
        ├── QueuedTtlExpired          nobody claimed it within its queued time-to-live:
        │                             ``expired``
        ├── Superseded                a newer run of its singleton key replaced it before
        │                             it started: ``cancelled``
        └── ResolvedAsFailed          a person resolved a parked run as failed

Each :class:`RunFailure` has a stable ``code`` and a ``retryable`` flag; the worker
records both on the run, and the retry policy reads ``retryable``. :data:`RUN_ERRORS`
maps every code a class here gives a run's ``error`` to that class, the codes the Redis
scripts write included (a test reads them from ``scripts/lua``).
"""

from __future__ import annotations

from typing import Any


class LeaseholdError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(LeaseholdError):
    """A setting is invalid; the message is one line naming it."""


class ApiError(LeaseholdError):
    """The API answered with an error status; ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or "error"
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.problem = problem


class StoreError(LeaseholdError):
    """A store operation failed for a reason the caller can act on."""


class RunNotFound(StoreError):
    """No run with this id (never created, or expired after retention)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class InvalidTransition(StoreError):
    """The run's current status does not allow the requested transition."""

    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}")
        self.run_id = run_id
        self.status = status
        self.action = action


class IdempotencyConflict(StoreError):
    """The idempotency key was used before with a different request body."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for run {run_id!r} with a different body"
        )
        self.key = key
        self.run_id = run_id


class AlreadyRetried(StoreError):
    """``POST /runs/{id}/retry`` of a run whose re-run still exists: retry that one instead.

    A run is re-run at most once at a time, so the links stay a chain
    (``retry_of`` / ``retried_by``) and two clicks make one new run, not two.
    """

    def __init__(self, run_id: str, retried_by: str) -> None:
        super().__init__(
            f"run {run_id!r} was already re-run as {retried_by!r}; retry that run instead"
        )
        self.run_id = run_id
        self.retried_by = retried_by


class OperationNotFound(StoreError):
    """No bulk operation with this id (never made, or its record's retention ended)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"operation {operation_id!r} not found")
        self.operation_id = operation_id


class OperationConflict(StoreError):
    """The operation cannot do that now: it is finished, or another process drives it."""

    def __init__(self, operation_id: str, reason: str) -> None:
        super().__init__(f"operation {operation_id!r}: {reason}")
        self.operation_id = operation_id
        self.reason = reason


class SingletonConflict(StoreError):
    """``on_conflict="reject"``: a run of this singleton key is active or queued (409)."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(f"singleton key {key!r} is held by run {run_id!r}")
        self.key = key
        self.run_id = run_id


class QueueNotDeclared(StoreError):
    """No configuration and no ``PUT /queues/{name}`` declared this queue."""

    # a 422 names the declared queues, but never more than this many of them
    NAMED_AT_MOST = 20

    def __init__(self, queue: str, declared: list[str]) -> None:
        shown = ", ".join(declared[: self.NAMED_AT_MOST])
        if len(declared) > self.NAMED_AT_MOST:
            shown += f" and {len(declared) - self.NAMED_AT_MOST} more"
        super().__init__(
            f"queue {queue!r} is not declared; declared: {shown or 'none'} "
            "(declare it in LEASEHOLD_QUEUES or with PUT /queues/{name})"
        )
        self.queue = queue
        self.declared = declared


class QueueLimitReached(StoreError):
    """Declaring one more queue would pass ``LEASEHOLD_MAX_QUEUES``."""

    def __init__(self, queue: str, max_queues: int) -> None:
        super().__init__(
            f"cannot declare queue {queue!r}: {max_queues} queues are declared, "
            "the most LEASEHOLD_MAX_QUEUES allows"
        )
        self.queue = queue
        self.max_queues = max_queues


class RateLimitsFull(StoreError):
    """Declaring one more rate-limit key would pass ``LEASEHOLD_MAX_RATE_LIMITS``."""

    def __init__(self, key: str, max_keys: int) -> None:
        super().__init__(
            f"cannot declare rate-limit key {key!r}: {max_keys} are declared, "
            "the most LEASEHOLD_MAX_RATE_LIMITS allows"
        )
        self.key = key
        self.max_keys = max_keys


class RateLimitNotDeclared(StoreError):
    """No declared rate-limit key or template covers this key."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"rate-limit key {key!r} is not declared (PUT /rate-limits/{{key}} declares it)"
        )
        self.key = key


class ScheduleNotFound(StoreError):
    """No schedule has this id."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id!r}")
        self.schedule_id = schedule_id


class ScheduleConflict(StoreError):
    """The id exists already, or the schedule changed since the caller read it (409)."""


class ScheduleLimitReached(StoreError):
    """Creating one more schedule would pass ``LEASEHOLD_SCHEDULE_MAX`` (409)."""


class QueueNotEmpty(StoreError):
    """Undeclaring a queue that still holds runs, or one this API's configuration names."""

    def __init__(self, queue: str, reason: str, holds: dict[str, int] | None = None) -> None:
        super().__init__(f"cannot undeclare queue {queue!r}: {reason}")
        self.queue = queue
        self.holds = holds or {}


class LeaseLost(StoreError):
    """A fenced write was rejected: this owner no longer holds the run."""

    def __init__(self, run_id: str, fence: int) -> None:
        super().__init__(f"lease on run {run_id!r} at fence {fence} is lost")
        self.run_id = run_id
        self.fence = fence


class HandlerError(LeaseholdError):
    """A handler cannot be found or its input is not acceptable."""


class UnknownHandler(HandlerError):
    """No handler is registered under this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown handler {name!r}")
        self.name = name


class InvalidInput(HandlerError):
    """The run input does not validate against the handler's input model."""

    def __init__(self, handler: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"input for handler {handler!r} is invalid")
        self.handler = handler
        self.problems = problems


class InvalidHandlerDefaults(HandlerError, ValueError):
    """``@handler(...)`` was given defaults that cannot hold; raised when the module is imported.

    Raised at import time, not at the first run: a typo in ``max_attempts`` must stop
    the worker (and the API) from starting rather than surface hours later.
    """

    def __init__(self, handler: str, problems: list[str]) -> None:
        super().__init__(f"@handler({handler!r}) defaults are invalid: {'; '.join(problems)}")
        self.handler = handler
        self.problems = problems


class InvalidEvent(LeaseholdError):
    """A handler tried to emit an event that would corrupt its run's stream."""


class EventTooLarge(InvalidEvent):
    """A handler tried to emit an event whose payload exceeds the configured bound."""

    def __init__(self, event_type: str, size: int, limit: int) -> None:
        super().__init__(f"event {event_type!r} is {size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


class RunFailure(LeaseholdError):
    """A reason for a run to end ``failed``; its fields become ``run.error``."""

    code = "run_failed"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.details = details or {}


class InvalidRateLimitUse(RunFailure):
    """``ctx.rate_limit`` with a cost outside 1..burst, or a bad Retry-After: a handler bug."""

    code = "invalid_rate_limit_use"


class HandlerFailed(RunFailure):
    """The handler raised an exception that is not a :class:`RunFailure`."""

    code = "handler_error"
    retryable = True


class BudgetExceeded(RunFailure):
    """A time or step budget ran out. Non-retryable: a retry recreates the condition."""

    code = "budget_exceeded"
    retryable = False


class FirstProgressTimeout(BudgetExceeded):
    """The operation gave no first sign of progress within ``first_progress_s``."""

    code = "first_progress_timeout"


class IdleTimeout(BudgetExceeded):
    """The operation went silent for ``idle_s`` after having made progress."""

    code = "idle_timeout"


class DurationExceeded(BudgetExceeded):
    """The operation (or the run) ran longer than ``max_duration_s``, progress or not."""

    code = "duration_exceeded"


class BudgetExhausted(BudgetExceeded):
    """The run took ``max_steps`` steps and the watchdog granted no further extension."""

    code = "budget_exhausted"


class OperationIntervened(RunFailure):
    """The watchdog decided to stop an operation (INTERVENE)."""

    code = "operation_intervened"
    retryable = False


class MemoryPressure(StoreError):
    """Redis memory is (or a write would take it) past ``LEASEHOLD_MEMORY_HIGH_WATER``.

    Refused early on purpose, so the headroom above the mark stays for the runs
    already running to write their outcomes. Nothing was written.
    """

    def __init__(
        self, *, used_bytes: int, max_bytes: int, high_water: float, cost_bytes: int = 0
    ) -> None:
        adding = f", and this write would add about {cost_bytes} bytes" if cost_bytes else ""
        super().__init__(
            f"Redis uses {used_bytes} of {max_bytes} bytes of maxmemory{adding}, past the "
            f"high-water mark of {high_water:.0%}: new runs are refused until memory frees "
            "(finished runs expire after their retention)"
        )
        self.used_bytes = used_bytes
        self.max_bytes = max_bytes
        self.high_water = high_water
        self.cost_bytes = cost_bytes


class EscalationRequested(LeaseholdError):
    """The watchdog escalated an operation to a person: the run parks in ``waiting_human``.

    Not a failure: the worker releases the lease and stores the evidence; a person
    resumes the run (POST /runs/{id}/resume) and the handler is called again with
    ``ctx.resume_input``. Handlers should let it propagate.
    """

    def __init__(self, reason: str, *, evidence: dict[str, Any]) -> None:
        super().__init__(f"escalated to a person: {reason}")
        self.reason = reason
        self.evidence = evidence


class EffectOutcomeUnknown(StoreError):
    """An effect started on an earlier attempt and its outcome was never recorded.

    Calling it again could apply it twice (it is not idempotent), so the run was
    parked in ``reconciliation_required`` by the same script that found the record;
    a person resolves it (POST /runs/{id}/resolve). Raised into the handler so it
    stops at once; handlers should let it propagate. The parked run's ``error``
    carries its code (written by the script, with the records in ``details``).
    """

    code = "effect_outcome_unknown"
    retryable = False

    def __init__(self, run_id: str, record: dict[str, Any]) -> None:
        super().__init__(
            f"effect {record.get('name')!r} (key {record.get('key')!r}) of run {run_id!r} "
            "started before and its outcome is unknown: the run needs a person to resolve it"
        )
        self.run_id = run_id
        self.record = record


class InvalidCheckpoint(RunFailure):
    """The state given to ``ctx.checkpoint`` cannot be stored (it is not JSON).

    Non-retryable: the same code would produce the same state again.
    """

    code = "invalid_checkpoint"
    retryable = False


class CheckpointTooLarge(InvalidCheckpoint):
    """The checkpoint state is larger than LEASEHOLD_MAX_CHECKPOINT_BYTES."""

    code = "checkpoint_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"checkpoint state is {size} bytes; the limit is {limit} "
            "(LEASEHOLD_MAX_CHECKPOINT_BYTES): keep large data elsewhere and checkpoint a "
            "reference to it",
            details={"size_bytes": size, "limit_bytes": limit},
        )
        self.size = size
        self.limit = limit


class InvalidEffect(RunFailure):
    """``ctx.effect`` was called with a name that cannot key a record."""

    code = "invalid_effect"
    retryable = False


class InvalidEffectResult(InvalidEffect):
    """An effect's function returned a value that is not JSON or is too large to record.

    The side effect has happened but its result is not recorded: its record stays
    ``started``, so a later attempt treats its outcome as unknown.
    """

    code = "invalid_effect_result"


class EffectNotApplied(RunFailure):
    """Raised by an effect's function when the side effect certainly did not happen.

    The started record is dropped, so a later attempt calls the function again
    (e.g. a payment API answered "declined" before charging anything). Any other
    exception leaves the outcome unknown. Retryable unless told otherwise.
    """

    code = "effect_not_applied"
    retryable = True


class RateLimitRelease(LeaseholdError):
    """The handler gives its run back to the queue until a rate-limit bucket lets it in.

    Raised by ``ctx.rate_limited(..., release=True)`` after an upstream 429, and by
    ``ctx.rate_limit`` when the token is further away than LEASEHOLD_RATE_LIMIT_MAX_WAIT_S.
    Let it propagate: the worker releases the run (fence+1) to start again
    ``delay_ms`` later by the Redis clock, and the attempt is not counted.
    """

    def __init__(self, key: str, delay_ms: int, reason: str) -> None:
        super().__init__(f"rate-limited on {key!r}: the run is released for {delay_ms} ms")
        self.key = key
        self.delay_ms = delay_ms
        self.reason = reason


class InvalidWait(RunFailure):
    """A durable wait was asked for with what cannot be recorded or kept.

    A name that is not ``[A-Za-z0-9_.-]{1,128}``, a negative, non-finite or
    longer-than-LEASEHOLD_MAX_WAIT_S duration, a time that is not a number or an
    aware datetime, a question that is not JSON or is larger than an event may be.
    Non-retryable: the same code asks for the same wait again.
    """

    code = "invalid_wait"
    retryable = False


class SignalTimeout(RunFailure):
    """``ctx.wait_for_signal(name, timeout_s=...)``: the time passed and no signal came.

    Raised in the handler when it resumes at the deadline (and again on every
    replay of that wait: the timeout is recorded). Non-retryable by default: a
    retry would wait for a signal whose time is over (DESIGN §1 rule 6); catch it
    to carry on without the signal.
    """

    code = "signal_timeout"
    retryable = False


class SpawnRefused(RunFailure):
    """``ctx.spawn`` was refused before anything was created.

    Past LEASEHOLD_MAX_CHILDREN_PER_RUN or LEASEHOLD_MAX_RUN_DEPTH (a handler that
    spawns itself stops there instead of filling Redis), a handler the worker does
    not know or an input it refuses, an undeclared queue, an input over
    LEASEHOLD_MAX_INPUT_BYTES. ``details`` say which bound and its value.
    Non-retryable: the same code asks for the same child again.
    """

    code = "spawn_refused"
    retryable = False


class ChildFailed(RunFailure):
    """``ctx.join(mode="all")``: a child ended without succeeding (or ``any``: every one did).

    ``child_id``, ``status`` (failed, cancelled, orphaned, expired) and the child's
    own ``error`` (its ``run.error``: code, message, details) are attached, and in
    ``details`` too, so the parent's ``run.error`` names the child that broke it.
    Not retryable by default: a retry of the parent joins the same child again.
    """

    code = "child_failed"
    retryable = False

    def __init__(self, child_id: str, status: str, error: dict[str, Any] | None) -> None:
        reason = (error or {}).get("message") or status
        super().__init__(
            f"child run {child_id} ended {status}: {reason}",
            details={"child_id": child_id, "status": status, "error": error},
        )
        self.child_id = child_id
        self.status = status
        self.error = error


class JoinTimeout(RunFailure):
    """``ctx.join(..., timeout_s=...)``: the time passed before the join's condition held.

    Raised when the parent resumes at the deadline (and on every replay of that
    join: the timeout is recorded). The children are not touched: they go on, and
    the parent's end applies their ``on_parent_end``. Catch it to carry on.
    """

    code = "join_timeout"
    retryable = False


class LeaseExpired(RunFailure):
    """The run's executor stopped renewing its lease and its policy did not retry it.

    Written on the ``orphaned`` run by the reconciler's script (``reconcile_expired``)
    as ``executor lease expired``, the evidence (owner, fence, last renewal, lease
    expiry, detection time) in ``details``; never raised.
    """

    code = "lease_expired"
    retryable = False


class QueuedTtlExpired(RunFailure):
    """Nobody claimed the run within its queued time-to-live: it ended ``expired``.

    Written by ``expire_queued`` (``details``: ``queued_for_ms``); never raised.
    """

    code = "queued_ttl_expired"
    retryable = False


class Superseded(RunFailure):
    """A newer run of its singleton key replaced the run before it started (``cancelled``).

    Written by the create of the newer run (``on_conflict="replace_queued"``;
    ``details``: ``superseded_by``); never raised.
    """

    code = "superseded"
    retryable = False


class ResolvedAsFailed(RunFailure):
    """A person resolved a parked run as failed (``POST /runs/{id}/resolve``).

    Written by ``resolve_run`` (``details``: the decision and the error it replaced);
    never raised.
    """

    code = "resolved_as_failed"
    retryable = False


class SignalInboxFull(StoreError):
    """A run holds as many unread signals as LEASEHOLD_MAX_PENDING_SIGNALS allows.

    (``pending`` None: as many waits and signal keys as LEASEHOLD_MAX_WAITS_PER_RUN.)
    """

    def __init__(self, run_id: str, pending: int | None) -> None:
        super().__init__(
            f"run {run_id!r} holds {pending} signals no wait has taken yet "
            "(LEASEHOLD_MAX_PENDING_SIGNALS): nothing was written"
            if pending is not None
            else f"run {run_id!r} holds as many waits and signal keys as it may "
            "(LEASEHOLD_MAX_WAITS_PER_RUN): nothing was written"
        )
        self.run_id = run_id
        self.pending = pending


class CapacityExceeded(LeaseholdError):
    """A per-process bound (SSE followers, followed runs or queues) is reached: retry later."""

    def __init__(self, what: str, limit: int, setting: str) -> None:
        super().__init__(f"this API process already serves {limit} {what} ({setting})")
        self.what = what
        self.limit = limit


def _run_errors() -> dict[str, type[RunFailure] | type[EffectOutcomeUnknown]]:
    """Every class of this module that names a code of its own, by that code."""
    found: dict[str, type[RunFailure] | type[EffectOutcomeUnknown]] = {
        EffectOutcomeUnknown.code: EffectOutcomeUnknown
    }
    pending: list[type[RunFailure]] = [RunFailure]
    while pending:
        error = pending.pop()
        pending.extend(error.__subclasses__())
        if error.__module__ == __name__ and "code" in vars(error):
            found[error.code] = error
    return dict(sorted(found.items()))


# the one code-to-error map: each code a run's ``error`` may carry from this module (what
# handlers raise, what the worker records, what the Redis scripts write) -> its class,
# with the code's ``retryable``; a new class here joins it by naming its own ``code``
RUN_ERRORS = _run_errors()
