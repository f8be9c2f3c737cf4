"""The handler author's surface: ``app.executor`` exports exactly its ``__all__``.

A handler needs one import (README "Write a handler"). These tests fail when a
public name disappears (a handler that used it would break) or an internal one
leaks into the package namespace (a handler would start depending on it).
"""

from __future__ import annotations

import subprocess
import sys
import types

import app.errors
import app.executor
from app.executor.children import Child, ChildOutcome
from app.executor.context import RunContext
from app.handlers import handler
from app.supervision.operation import Operation

HANDLER_SURFACE = {
    "RunContext": RunContext,
    "handler": handler,
    "Operation": Operation,
    "Child": Child,
    "ChildOutcome": ChildOutcome,
    **{
        name: getattr(app.errors, name)
        for name in (
            "LeaseLost",
            "LeaseholdError",
            "RunFailure",
            "EffectNotApplied",
            "BudgetExceeded",
            "FirstProgressTimeout",
            "IdleTimeout",
            "DurationExceeded",
            "BudgetExhausted",
            "OperationIntervened",
            "EscalationRequested",
            "InvalidEvent",
            "EventTooLarge",
            "InvalidCheckpoint",
            "CheckpointTooLarge",
            "InvalidEffect",
            "InvalidEffectResult",
            "RateLimitRelease",
            "RateLimitNotDeclared",
            "InvalidRateLimitUse",
            "InvalidWait",
            "SignalTimeout",
            "SpawnRefused",
            "ChildFailed",
            "JoinTimeout",
        )
    },
}


def test_all_lists_exactly_the_handler_surface() -> None:
    assert sorted(app.executor.__all__) == sorted(HANDLER_SURFACE)
    assert len(app.executor.__all__) == len(set(app.executor.__all__))


def test_every_public_name_is_the_object_handlers_expect() -> None:
    for name, expected in HANDLER_SURFACE.items():
        assert getattr(app.executor, name) is expected, name


def test_nothing_outside_all_is_exported() -> None:
    """Only ``__all__`` and the package's own submodules live in its namespace."""
    leaked = [
        name
        for name, value in vars(app.executor).items()
        if not name.startswith("__")
        and name not in app.executor.__all__
        and not (isinstance(value, types.ModuleType) and value.__name__ == f"app.executor.{name}")
    ]
    assert leaked == []


def test_star_import_in_a_fresh_interpreter_gives_the_surface() -> None:
    """What a handler module sees, without anything this test session imported."""
    code = "from app.executor import *\nprint(sorted(n for n in dir() if not n.startswith('__')))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == str(sorted(HANDLER_SURFACE))
