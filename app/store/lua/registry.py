"""Every transition's binding, found in the rooms: what a test holds ``scripts/lua`` to.

There is no list of bindings to keep in step: each ``Transition`` records itself when
its room's ``bindings`` module is imported, and :func:`every_transition` imports them all.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Protocol

import app.store
from app.store.lua.splicing import ArgumentRecords


class Binding(Protocol):
    """What the registry knows of a binding (a :class:`~app.store.lua.transition.Transition`)."""

    @property
    def name(self) -> str: ...  # the script's name

    @property
    def argv(self) -> type[tuple[Any, ...]]: ...  # the ARGV record

    @property
    def group(self) -> type[tuple[Any, ...]] | None: ...  # the record of each group

    @property
    def subgroup(self) -> type[tuple[Any, ...]] | None: ...  # a segment's records


# every binding made so far, by script name: each Transition records itself here
BINDINGS: dict[str, Binding] = {}


def every_transition() -> dict[str, Binding]:
    """Every binding by script name, each room's ``bindings`` module imported first."""
    for module in pkgutil.walk_packages(app.store.__path__, "app.store."):
        if module.name.endswith(".bindings"):
            importlib.import_module(module.name)
    return dict(BINDINGS)


def argument_records() -> dict[str, ArgumentRecords]:
    """Each script's ARGV record and group records, by script name, from its binding."""
    return {name: _records_of(binding) for name, binding in every_transition().items()}


def _records_of(binding: Binding) -> ArgumentRecords:
    records = [record for record in (binding.argv, binding.group, binding.subgroup) if record]
    return ArgumentRecords(
        fixed=_fields(binding.argv),
        records={record.__name__: _fields(record) for record in records},
    )


def _fields(record: type[tuple[Any, ...]]) -> tuple[str, ...]:
    """A NamedTuple's field names (typing knows its class only as a tuple type)."""
    return tuple(getattr(record, "_fields"))  # noqa: B009
