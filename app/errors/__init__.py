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
    │   ├── HistoryTooLarge           a run's step records do not fit one history (413)
    │   ├── SignalInboxFull           a run holds LEASEHOLD_MAX_PENDING_SIGNALS unread (429)
    │   ├── QuotaExceeded             a namespace's quota refuses the write (429, named)
    │   ├── VersionDrift              a replay asked for another step than recorded: the run
    │   │                             is parked in reconciliation_required (version_drift)
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

The tree is one package, a module per branch: :mod:`app.errors.base` (the root, the
configuration, the API's answer, a process's cap), :mod:`app.errors.store`
(``StoreError``'s family), :mod:`app.errors.handlers` (the registry's refusals and what a
handler raises that is not a failure), :mod:`app.errors.failures` (``RunFailure``'s
family) and :mod:`app.errors.codes` (:data:`RUN_ERRORS`). Import every name from here,
``from app.errors import RunNotFound``; the modules import each other, never this one.
"""

from __future__ import annotations

from app.errors.base import (
    ApiError,
    CapacityExceeded,
    ConfigurationError,
    LeaseholdError,
)
from app.errors.codes import RUN_ERRORS
from app.errors.failures import (
    BudgetExceeded,
    BudgetExhausted,
    CheckpointTooLarge,
    ChildFailed,
    DurationExceeded,
    EffectNotApplied,
    FirstProgressTimeout,
    HandlerFailed,
    IdleTimeout,
    InvalidCheckpoint,
    InvalidEffect,
    InvalidEffectResult,
    InvalidRateLimitUse,
    InvalidWait,
    JoinTimeout,
    LeaseExpired,
    OperationIntervened,
    QueuedTtlExpired,
    ResolvedAsFailed,
    RunFailure,
    SignalTimeout,
    SpawnRefused,
    Superseded,
)
from app.errors.handlers import (
    EscalationRequested,
    EventTooLarge,
    HandlerError,
    InvalidEvent,
    InvalidHandlerDefaults,
    InvalidInput,
    RateLimitRelease,
    UnknownHandler,
)
from app.errors.store import (
    AlreadyRetried,
    EffectOutcomeUnknown,
    HistoryTooLarge,
    IdempotencyConflict,
    InvalidTransition,
    LeaseLost,
    MemoryPressure,
    OperationConflict,
    OperationNotFound,
    QueueLimitReached,
    QueueNotDeclared,
    QueueNotEmpty,
    QuotaExceeded,
    RateLimitNotDeclared,
    RateLimitsFull,
    RunNotFound,
    ScheduleConflict,
    ScheduleLimitReached,
    ScheduleNotFound,
    SignalInboxFull,
    SingletonConflict,
    StoreError,
    VersionDrift,
)

__all__ = [
    "RUN_ERRORS",
    "AlreadyRetried",
    "ApiError",
    "BudgetExceeded",
    "BudgetExhausted",
    "CapacityExceeded",
    "CheckpointTooLarge",
    "ChildFailed",
    "ConfigurationError",
    "DurationExceeded",
    "EffectNotApplied",
    "EffectOutcomeUnknown",
    "EscalationRequested",
    "EventTooLarge",
    "FirstProgressTimeout",
    "HandlerError",
    "HandlerFailed",
    "HistoryTooLarge",
    "IdempotencyConflict",
    "IdleTimeout",
    "InvalidCheckpoint",
    "InvalidEffect",
    "InvalidEffectResult",
    "InvalidEvent",
    "InvalidHandlerDefaults",
    "InvalidInput",
    "InvalidRateLimitUse",
    "InvalidTransition",
    "InvalidWait",
    "JoinTimeout",
    "LeaseExpired",
    "LeaseLost",
    "LeaseholdError",
    "MemoryPressure",
    "OperationConflict",
    "OperationIntervened",
    "OperationNotFound",
    "QueueLimitReached",
    "QueueNotDeclared",
    "QueueNotEmpty",
    "QueuedTtlExpired",
    "QuotaExceeded",
    "RateLimitNotDeclared",
    "RateLimitRelease",
    "RateLimitsFull",
    "ResolvedAsFailed",
    "RunFailure",
    "RunNotFound",
    "ScheduleConflict",
    "ScheduleLimitReached",
    "ScheduleNotFound",
    "SignalInboxFull",
    "SignalTimeout",
    "SingletonConflict",
    "SpawnRefused",
    "StoreError",
    "Superseded",
    "UnknownHandler",
    "VersionDrift",
]
