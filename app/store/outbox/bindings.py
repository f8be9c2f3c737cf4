"""Typed bindings of ``scripts/lua/outbox/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import (
    CodeReply,
    Transition,
    _code_reply,
)


class ChildIdGroup(NamedTuple):
    """One child id in a variadic ARGV tail."""

    child_id: str


class ChildEndedArgs(NamedTuple):
    """ARGV of ``child_ended``."""

    parent_id: str
    child_id: str
    status: str
    outcome: str  # '{"status":"<status>","output":...,"error":...}'
    maxlen: int
    wake_channel: str
    reason: str = ""  # '' | child_record_gone (the outbox found no record to read)


def _child_ended_keys(k: QueueKeys, run_id: str, a: ChildEndedArgs) -> tuple[str, ...]:
    return (
        k.run(a.parent_id),
        k.events(a.parent_id),
        k.family(a.parent_id),
        k.children(a.parent_id),
        k.joining(a.parent_id),
        k.delayed,
    )


CHILD_ENDED: Transition[ChildEndedArgs, CodeReply] = Transition(
    "child_ended", _child_ended_keys, ChildEndedArgs, _code_reply, durable=True
)


class CancelChildrenArgs(NamedTuple):
    """ARGV of ``cancel_children``."""

    parent_id: str
    reason: str  # parent_cancelled | parent_ended
    retention: str
    maxlen: int
    unborn_ms: int
    groups: Sequence[ChildIdGroup]


def _cancel_children_keys(k: QueueKeys, run_id: str, a: CancelChildrenArgs) -> tuple[str, ...]:
    return (k.run_prefix, k.events_prefix, k.leases, k.delayed, k.idem_prefix)


def _statuses(reply: Sequence[Any]) -> CodeReply:
    return CodeReply(reply[0], ",".join(reply[1:]))


CANCEL_CHILDREN: Transition[CancelChildrenArgs, CodeReply] = Transition(
    "cancel_children",
    _cancel_children_keys,
    CancelChildrenArgs,
    _statuses,
    durable=True,
    group=ChildIdGroup,
)


class TakeOutboxArgs(NamedTuple):
    """ARGV of ``take_outbox``."""

    max_entries: int
    hold_ms: int
    entry: str  # '' for the due ones


def _outbox_keys(k: QueueKeys, run_id: str, a: TakeOutboxArgs) -> tuple[str, ...]:
    return (k.outbox,)


def _entries(reply: Sequence[Any]) -> list[str]:
    return list(reply[1:])


TAKE_OUTBOX: Transition[TakeOutboxArgs, list[str]] = Transition(
    "take_outbox", _outbox_keys, TakeOutboxArgs, _entries
)
