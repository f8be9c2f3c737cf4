"""Typed bindings of ``scripts/lua/progress/``: each script's KEYS, ARGV record and reply.

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
    _run_keys,
)


class CheckpointArgs(NamedTuple):
    """ARGV of ``checkpoint_run``."""

    owner_id: str
    fence: int
    state: str
    effect_seq: str
    maxlen: int


CHECKPOINT_RUN: Transition[CheckpointArgs, CodeReply] = Transition(
    "checkpoint_run", _run_keys, CheckpointArgs, _code_reply, durable=True
)


class PatchArgs(NamedTuple):
    """ARGV of ``note_patch``."""

    owner_id: str
    fence: int
    patch_id: str
    patched: int
    maxlen: int


def _patch_keys(k: QueueKeys, run_id: str, a: PatchArgs) -> tuple[str, ...]:
    return (k.run(run_id), k.events(run_id), k.effects(run_id))


NOTE_PATCH: Transition[PatchArgs, CodeReply] = Transition(
    "note_patch", _patch_keys, PatchArgs, _code_reply, durable=True
)


class DriftArgs(NamedTuple):
    """ARGV of ``report_drift``."""

    owner_id: str
    fence: int
    run_id: str
    details: str
    maxlen: int


def _drift_keys(k: QueueKeys, run_id: str, a: DriftArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.leases)


REPORT_DRIFT: Transition[DriftArgs, CodeReply] = Transition(
    "report_drift", _drift_keys, DriftArgs, _code_reply, durable=True
)


class StartEffectArgs(NamedTuple):
    """ARGV of ``start_effect``."""

    owner_id: str
    fence: int
    run_id: str
    field: str
    key: str
    name: str
    ordinal: int
    idempotent: int
    maxlen: int
    # the step's place among the run's steps ('' notes nothing): the drift check's record
    position: int | str = ""


def _start_effect_keys(k: QueueKeys, run_id: str, a: StartEffectArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.effects(a.run_id), k.leases)


START_EFFECT: Transition[StartEffectArgs, CodeReply] = Transition(
    "start_effect", _start_effect_keys, StartEffectArgs, _code_reply, durable=True
)


class RecordEffectArgs(NamedTuple):
    """ARGV of ``record_effect``."""

    owner_id: str
    fence: int
    field: str
    outcome: str
    result: str
    maxlen: int


def _record_effect_keys(k: QueueKeys, run_id: str, a: RecordEffectArgs) -> tuple[str, ...]:
    return (k.run(run_id), k.events(run_id), k.effects(run_id))


RECORD_EFFECT: Transition[RecordEffectArgs, CodeReply] = Transition(
    "record_effect", _record_effect_keys, RecordEffectArgs, _code_reply, durable=True
)
