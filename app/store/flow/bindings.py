"""Typed bindings of ``scripts/lua/flow/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import (
    StatusReply,
    Transition,
    _status_reply,
)


class LimitPair(NamedTuple):
    """One limit in ``set_limits``' ARGV pairs: ``q``, ``h:<handler>``, ``k:*``, ``k:<key>``."""

    field: str
    limit: int


class SetLimitsArgs(NamedTuple):
    """ARGV of ``set_limits``: the queue's limits, replaced whole."""

    wake_max: int
    wake_channel: str
    groups: Sequence[LimitPair]


def _set_limits_keys(k: QueueKeys, run_id: str, a: SetLimitsArgs) -> tuple[str, ...]:
    return (k.limits, k.ready)


def _woken(reply: Sequence[Any]) -> int:
    return int(reply[1])


SET_LIMITS: Transition[SetLimitsArgs, int] = Transition(
    "set_limits", _set_limits_keys, SetLimitsArgs, _woken, durable=True, group=LimitPair
)


class SetPriorityArgs(NamedTuple):
    """ARGV of ``set_priority``."""

    run_id: str
    priority: int
    boost_ms: int
    maxlen: int


def _set_priority_keys(k: QueueKeys, run_id: str, a: SetPriorityArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id))


SET_PRIORITY: Transition[SetPriorityArgs, StatusReply] = Transition(
    "set_priority", _set_priority_keys, SetPriorityArgs, _status_reply
)


class RecountArgs(NamedTuple):
    """ARGV of ``recount_slots``."""

    wake_max: int
    wake_channel: str


class RecountReply(NamedTuple):
    """``recount_slots``' answer: each (field, counted, held) fixed, and lanes woken."""

    fixes: list[tuple[str, str, str]]
    woken: int


def _recount_keys(k: QueueKeys, run_id: str, a: RecountArgs) -> tuple[str, ...]:
    return (k.leases, k.ready, k.run_prefix)


def _recount_reply(reply: Sequence[Any]) -> RecountReply:
    _code, fixes, woken = reply
    return RecountReply([(str(f), str(c), str(h)) for f, c, h in fixes], int(woken))


RECOUNT_SLOTS: Transition[RecountArgs, RecountReply] = Transition(
    "recount_slots", _recount_keys, RecountArgs, _recount_reply
)
