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

The names are found when first asked for (PEP 562 ``__getattr__``): a handler module's
``from app.executor import RunContext, handler`` imports the context and the registry,
not ``Child`` and ``Operation`` with the children, effects, waits and supervision they
stand on. A worker imports its handler modules before its first claim, and those
modules are ~60 ms of a start it does not need to claim a run (issue 19 aim 2): they
come once the first claim is sent, or when a handler first names one. Importing any
``app.executor.*`` module runs this one, so it imports nothing of its own.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors see: the same names, eagerly
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
        LeaseLost,
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
del TYPE_CHECKING  # the namespace holds __all__ only (tests/executor/test_surface.py)

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
    "LeaseLost",
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


def __getattr__(name: str) -> object:
    """A name of ``__all__``, imported from its module on first use (then a plain global)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    homes = {
        "Child": "app.executor.children",
        "ChildOutcome": "app.executor.children",
        "RunContext": "app.executor.context",
        "handler": "app.handlers",
        "Operation": "app.supervision.operation",
    }
    value = getattr(importlib.import_module(homes.get(name, "app.errors")), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
