"""The handler author's surface: the one import a handler needs.

``from app.executor import RunContext, handler, EffectNotApplied`` and nothing
else: the run's context, the decorator that registers a handler, the operation
it supervises, a spawned child's handle and outcome (``Child``,
``ChildOutcome``), and the error types a handler raises on purpose or may catch
around ``ctx.operation`` / ``ctx.effect`` / ``ctx.checkpoint`` / ``ctx.emit``
to clean up. ``__all__`` lists exactly these names, and
``tests/executor/test_surface.py`` fails when an internal name leaks into this
module or a public one disappears.

The worker's machinery (``worker``, ``courier``, ``heartbeat``, ``execution``,
``listener``, ``slots``, ``table``, ...) lives in submodules that are not part of
this surface: handlers must not import them, and they may change without notice.
(No ``from __future__ import annotations`` here: it would export ``annotations``.)
"""

from app.errors import (
    BudgetExceeded,
    BudgetExhausted,
    CheckpointTooLarge,
    ChildFailed,
    DurationExceeded,
    EffectNotApplied,
    EscalationRequested,
    EventTooLarge,
    FirstProgressTimeout,
    IdleTimeout,
    InvalidCheckpoint,
    InvalidEffect,
    InvalidEffectResult,
    InvalidEvent,
    InvalidRateLimitUse,
    InvalidWait,
    JoinTimeout,
    LeaseholdError,
    OperationIntervened,
    RateLimitNotDeclared,
    RateLimitRelease,
    RunFailure,
    SignalTimeout,
    SpawnRefused,
)
from app.executor.children import Child, ChildOutcome
from app.executor.context import RunContext
from app.handlers import handler
from app.supervision.operation import Operation

__all__ = [
    "BudgetExceeded",
    "BudgetExhausted",
    "CheckpointTooLarge",
    "Child",
    "ChildFailed",
    "ChildOutcome",
    "DurationExceeded",
    "EffectNotApplied",
    "EscalationRequested",
    "EventTooLarge",
    "FirstProgressTimeout",
    "IdleTimeout",
    "InvalidCheckpoint",
    "InvalidEffect",
    "InvalidEffectResult",
    "InvalidEvent",
    "InvalidRateLimitUse",
    "InvalidWait",
    "JoinTimeout",
    "LeaseholdError",
    "Operation",
    "OperationIntervened",
    "RateLimitNotDeclared",
    "RateLimitRelease",
    "RunContext",
    "RunFailure",
    "SignalTimeout",
    "SpawnRefused",
    "handler",
]
