"""Typed bindings of ``scripts/lua/schedules/``: each script's KEYS, ARGV record and reply.

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


class PutScheduleArgs(NamedTuple):
    """ARGV of ``put_schedule``."""

    schedule_id: str
    mode: str  # "create" | "update"
    expected_version: int | str  # '' for any
    fields: str  # JSON object: record field -> string or number
    next_fire_ms: int | str  # '' for none (paused, or never again)


class PutScheduleReply(NamedTuple):
    """``put_schedule``'s answer: OK, CONFLICT or NOT_FOUND, the version, the Redis time."""

    code: str
    version: int
    now_ms: int


def _schedule_keys(k: QueueKeys, run_id: str, a: PutScheduleArgs) -> tuple[str, ...]:
    return (k.schedule(a.schedule_id), k.schedule_due, k.schedule_buffered)


def _put_schedule_reply(reply: Sequence[Any]) -> PutScheduleReply:
    code, version, now = reply
    return PutScheduleReply(code, int(version), int(now))


PUT_SCHEDULE: Transition[PutScheduleArgs, PutScheduleReply] = Transition(
    "put_schedule", _schedule_keys, PutScheduleArgs, _put_schedule_reply, durable=True
)


class FireGroup(NamedTuple):
    """One fire time in ``fire_schedule``'s ARGV groups, and the run id derived from it."""

    fire_ms: int
    run_id: str


class FireArgs(NamedTuple):
    """ARGV of ``fire_schedule``."""

    schedule_id: str
    mode: str  # "tick" | "buffered" | "trigger" | "backfill"
    expected_ms: int | str  # tick: the due score read; '' otherwise
    version: int
    next_ms: int | str  # tick: the next fire after these; '' for none
    missed: int
    overlap: str  # '' for the schedule's own
    queued_ttl_ms: int
    maxlen: int
    wake_channel: str
    cancel_channel: str
    retention: str
    groups: Sequence[FireGroup]


class FireReply(NamedTuple):
    """``fire_schedule``'s answer (code OK, NOT_FOUND or CONFLICT: nothing written)."""

    code: str
    created: list[str]
    skipped: int
    buffered: bool
    cancelled: list[str]


def _fire_keys(k: QueueKeys, run_id: str, a: FireArgs) -> tuple[str, ...]:
    return (
        k.schedule(a.schedule_id),
        k.schedule_due,
        k.schedule_buffered,
        k.ready,
        k.runs,
        k.unclaimed,
        k.leases,
        k.run_prefix,
        k.events_prefix,
        k.idem_prefix,
    )


def _fire_reply(reply: Sequence[Any]) -> FireReply:
    code, created, skipped, held, cancelled = reply
    return FireReply(code, list(created), int(skipped), bool(int(held)), list(cancelled))


FIRE_SCHEDULE: Transition[FireArgs, FireReply] = Transition(
    "fire_schedule", _fire_keys, FireArgs, _fire_reply, durable=True, group=FireGroup
)
