"""Every transition's binding, found in the rooms: what a test holds ``scripts/lua`` to.

There is no list of bindings to keep in step: each ``Transition`` records itself when
its room's ``bindings`` module is imported, and :func:`every_transition` imports them all.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import app.store
from app.store.lua.transition import BINDINGS, Transition


def every_transition() -> dict[str, Transition[Any, Any]]:
    """Every binding by script name, each room's ``bindings`` module imported first."""
    for module in pkgutil.walk_packages(app.store.__path__, "app.store."):
        if module.name.endswith(".bindings"):
            importlib.import_module(module.name)
    return dict(BINDINGS)
