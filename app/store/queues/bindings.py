"""Typed bindings of ``scripts/lua/queues/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.transition import (
    DeclareReply,
    Transition,
    _declare_reply,
)


class DeclareArgs(NamedTuple):
    """ARGV of ``declare_queue``."""

    name: str
    max_queues: int


def _declare_keys(k: QueueKeys, run_id: str, a: DeclareArgs) -> tuple[str, ...]:
    return (GlobalKeys(k.prefix).queues,)


DECLARE_QUEUE: Transition[DeclareArgs, DeclareReply] = Transition(
    "declare_queue", _declare_keys, DeclareArgs, _declare_reply
)


class UndeclareArgs(NamedTuple):
    """ARGV of ``undeclare_queue``."""

    name: str


class UndeclareReply(NamedTuple):
    """OK, NOT_FOUND or CONFLICT, and what each index held (``HELD_INDEXES`` order)."""

    code: str
    counts: list[int]


def _undeclare_keys(k: QueueKeys, run_id: str, a: UndeclareArgs) -> tuple[str, ...]:
    return (
        GlobalKeys(k.prefix).queues,
        k.ready,
        k.delayed,
        k.leases,
        k.parked,
        k.unclaimed,
        k.runs,
    )


def _undeclare_reply(reply: Sequence[Any]) -> UndeclareReply:
    code, *counts = reply
    return UndeclareReply(code, [int(count) for count in counts])


UNDECLARE_QUEUE: Transition[UndeclareArgs, UndeclareReply] = Transition(
    "undeclare_queue", _undeclare_keys, UndeclareArgs, _undeclare_reply
)
