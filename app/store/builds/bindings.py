"""Typed bindings of ``scripts/lua/builds/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import Transition


class UpgradeGroup(NamedTuple):
    """One run in ``upgrade_runs``' ARGV groups."""

    id: str


class UpgradeArgs(NamedTuple):
    """ARGV of ``upgrade_runs``."""

    from_build: str  # '' : pinned to any build
    to_build: str  # '' : pinned to none
    handler: str  # '' : any handler
    maxlen: int
    wake_channel: str
    groups: Sequence[UpgradeGroup]


class UpgradeReply(NamedTuple):
    """One ``(code, status, build it was pinned to)`` per run, in the order sent."""

    answers: list[tuple[str, str, str]]


def _prefix_keys(k: QueueKeys, run_id: str, a: Any) -> tuple[str, ...]:
    return (k.run_prefix, k.events_prefix)


def _upgrade_reply(reply: Sequence[Any]) -> UpgradeReply:
    _code, answers = reply
    rows = []
    for answer in answers:
        code, status, build = [*str(answer).split(" ", 2), "", ""][:3]
        rows.append((code, status, build))
    return UpgradeReply(rows)


UPGRADE_RUNS: Transition[UpgradeArgs, UpgradeReply] = Transition(
    "upgrade_runs", _prefix_keys, UpgradeArgs, _upgrade_reply, durable=True, group=UpgradeGroup
)


class UnavailableArgs(NamedTuple):
    """ARGV of ``note_unavailable``."""

    live_builds: str  # space-separated
    maxlen: int
    max_reads: int


class UnavailableReply(NamedTuple):
    """Runs told in this call, and the queued runs of each build no live worker has."""

    noted: int
    waiting: dict[str, int]


def _unavailable_reply(reply: Sequence[Any]) -> UnavailableReply:
    _code, noted, flat = reply
    waiting = {str(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
    return UnavailableReply(int(noted), waiting)


NOTE_UNAVAILABLE: Transition[UnavailableArgs, UnavailableReply] = Transition(
    "note_unavailable", _prefix_keys, UnavailableArgs, _unavailable_reply
)
