"""Typed bindings of ``scripts/lua/waits/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from typing import NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import (
    CodeReply,
    Transition,
    _code_reply,
)


class ParkArgs(NamedTuple):
    """ARGV of ``park_run``."""

    owner_id: str
    fence: int
    run_id: str
    kind: str
    ordinal: int
    name: str
    duration_ms: int | str  # '' for none
    at_ms: int | str  # '' for none
    question: str  # '' but for a question
    maxlen: int
    wake_channel: str
    max_waits: int
    # the step's place among the run's steps ('' notes nothing): the drift check's record
    position: int | str = ""


class SignalArgs(NamedTuple):
    """ARGV of ``signal_run``."""

    run_id: str
    name: str
    payload: str
    max_pending: int
    maxlen: int
    wake_channel: str
    signal_id: str  # '' for none
    max_waits: int


def _park_keys(k: QueueKeys, run_id: str, a: ParkArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.waits(a.run_id), k.leases, k.delayed)


def _signal_keys(k: QueueKeys, run_id: str, a: SignalArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.waits(a.run_id), k.delayed)


PARK_RUN: Transition[ParkArgs, CodeReply] = Transition(
    "park_run", _park_keys, ParkArgs, _code_reply, durable=True
)


SIGNAL_RUN: Transition[SignalArgs, CodeReply] = Transition(
    "signal_run", _signal_keys, SignalArgs, _code_reply, durable=True
)
