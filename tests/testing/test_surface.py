"""``app.testing`` exports exactly its ``__all__``: the kit users' CI imports."""

from __future__ import annotations

import types

import app.testing

SURFACE = {
    "ReplayReport",
    "ReplayUnsupported",
    "TestStack",
    "load_history",
    "replay",
    "replay_async",
}


def test_all_lists_exactly_the_kit() -> None:
    assert set(app.testing.__all__) == SURFACE


def test_nothing_outside_all_is_exported() -> None:
    leaked = [
        name
        for name, value in vars(app.testing).items()
        if not name.startswith("__")
        and name not in app.testing.__all__
        and not (isinstance(value, types.ModuleType) and value.__name__ == f"app.testing.{name}")
    ]
    assert leaked == []
