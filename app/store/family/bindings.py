"""Typed bindings of ``scripts/lua/family/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import (
    Transition,
)
from app.store.outbox.bindings import ChildIdGroup


class SpawnArgs(NamedTuple):
    """ARGV of ``spawn_child``."""

    owner_id: str
    fence: int
    run_id: str
    ordinal: int
    child_id: str
    on_parent_end: str  # cancel | detach
    max_children: int
    max_depth: int
    # the step's place among the run's steps ('' notes nothing): the drift check's record
    position: int | str = ""


class SpawnReply(NamedTuple):
    """``spawn_child``'s answer: the child its step names and what the child inherits.

    ``child_id`` is the count for FULL; ``ended`` is True on a REPLAYED step whose
    child's outcome came already.
    """

    code: str
    child_id: str
    root_id: str
    depth: int
    concurrency_key: str
    traceparent: str
    ended: bool


def _spawn_keys(k: QueueKeys, run_id: str, a: SpawnArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.children(a.run_id), k.family(a.run_id))


def _spawn_reply(reply: Sequence[Any]) -> SpawnReply:
    code, child_id, root_id, depth, ckey, traceparent, ended = reply
    return SpawnReply(code, child_id, root_id, int(depth or 0), ckey, traceparent, ended == "1")


SPAWN_CHILD: Transition[SpawnArgs, SpawnReply] = Transition(
    "spawn_child", _spawn_keys, SpawnArgs, _spawn_reply, durable=True
)


class JoinArgs(NamedTuple):
    """ARGV of ``join_children``."""

    owner_id: str
    fence: int
    run_id: str
    ordinal: int
    mode: str  # all | any | settled
    timeout_ms: int | str  # '' for none
    maxlen: int
    wake_channel: str
    max_waits: int
    # the step's place among the run's steps ('' notes nothing): the drift check's record
    position: int | str
    groups: Sequence[ChildIdGroup]


class JoinReply(NamedTuple):
    """``join_children``'s answer: its code, value, and (REPLAYED) one outcome per child."""

    code: str
    value: str
    outcomes: list[str]


def _join_keys(k: QueueKeys, run_id: str, a: JoinArgs) -> tuple[str, ...]:
    return (
        k.run(a.run_id),
        k.events(a.run_id),
        k.waits(a.run_id),
        k.leases,
        k.delayed,
        k.family(a.run_id),
        k.children(a.run_id),
        k.joining(a.run_id),
        k.joins,
    )


def _join_reply(reply: Sequence[Any]) -> JoinReply:
    return JoinReply(reply[0], reply[1], list(reply[2:]))


JOIN_CHILDREN: Transition[JoinArgs, JoinReply] = Transition(
    "join_children", _join_keys, JoinArgs, _join_reply, durable=True, group=ChildIdGroup
)
