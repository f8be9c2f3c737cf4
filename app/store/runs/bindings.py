"""Typed bindings of ``scripts/lua/runs/``: each script's KEYS, ARGV record and reply.

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


class CreateShape(NamedTuple):
    """What a segment of ``create_run`` / ``create_runs`` ARGV shares (shapes.lua ``create_shape``).

    Everything of a run but its id, input, idempotency key and fingerprint: the runs
    of a batch mostly share all of it, so a shape is sent and checked once for the
    runs that follow it, not once per run.
    """

    handler: str
    max_attempts: int
    on_lease_expired: str
    metadata: str
    budget: str
    retention_ms: int | str
    queued_ttl_ms: int
    traceparent: str
    start_at_ms: int | str  # '' for none
    delay_ms: int | str  # '' for none
    rate_limits: str  # '' for none (store/ratelimits.py start_gates_arg)
    concurrency_key: str  # '' for none
    singleton_key: str  # '' for none
    on_conflict: str  # reject | enqueue | cancel_active | replace_queued
    priority: int
    boost_ms: int  # priority x LEASEHOLD_PRIORITY_AGING_STEP_S, in ms
    parent_id: str  # '' for a top-level run
    root_id: str  # '' : the run's own id
    depth: int
    # 'pinned': a claim pins the run to its worker's build (claim.lua pins_run); '' or
    # 'auto_upgrade': any build's worker may take it at each claim
    versioning: str = ""


class CreateRun(NamedTuple):
    """One run's own fields in a segment of create ARGV (after its shape and count)."""

    run_id: str
    input: str
    idempotency_key: str  # '' for none
    fingerprint: str


# a shape and the runs of it that follow it in ARGV (as its count, then their fields)
CreateSegment = tuple[CreateShape, Sequence[CreateRun]]


class CreateArgs(NamedTuple):
    """ARGV of ``create_run`` (one segment of one run) and ``create_runs`` (a chunk of one
    queue, in segments)."""

    queue: str
    maxlen: int
    wake_channel: str
    retention: str  # the per-status retention spec, for a run replace_queued supersedes
    groups: Sequence[CreateSegment]


class CreateReply(NamedTuple):
    """``create_run``'s answer: OK, REPLAYED, CONFLICT (``run_id``: the earlier run) or
    SINGLETON (``run_id``: the run holding or queued on the singleton key)."""

    code: str
    run_id: str
    created_at_ms: int


def _create_keys(k: QueueKeys, run_id: str, a: CreateArgs) -> tuple[str, ...]:
    ((_, (run,)),) = a.groups
    return (
        k.run(run.run_id),
        k.events(run.run_id),
        k.ready,
        k.runs,
        k.idem(run.idempotency_key),
        k.unclaimed,
    )


def _create_reply(reply: Sequence[Any]) -> CreateReply:
    code, run_id, created_ms = reply
    return CreateReply(code, run_id, int(created_ms))


CREATE_RUN: Transition[CreateArgs, CreateReply] = Transition(
    "create_run",
    _create_keys,
    CreateArgs,
    _create_reply,
    durable=True,
    group=CreateShape,
    subgroup=CreateRun,
)


def _create_many_keys(k: QueueKeys, run_id: str, a: CreateArgs) -> tuple[str, ...]:
    return (k.ready, k.runs, k.unclaimed, k.run_prefix, k.events_prefix, k.idem_prefix)


def _create_replies(reply: Sequence[Any]) -> list[CreateReply]:
    # tuple.__new__ with the class: a NamedTuple's own __new__ is a Python function, a
    # frame per run of every batch; the same CreateReply
    make = tuple.__new__
    return [
        make(CreateReply, (reply[i], reply[i + 1], int(reply[i + 2])))
        for i in range(0, len(reply), 3)
    ]


assert CreateReply._fields == ("code", "run_id", "created_at_ms"), "_create_replies: by position"


CREATE_RUNS: Transition[CreateArgs, list[CreateReply]] = Transition(
    "create_runs",
    _create_many_keys,
    CreateArgs,
    _create_replies,
    durable=True,
    group=CreateShape,
    subgroup=CreateRun,
)


class RetryArgs(NamedTuple):
    """ARGV of ``retry_run``: re-run ``old_id`` as the new run ``run_id`` (same queue)."""

    old_id: str
    run_id: str
    checkpoint: str  # keep | drop
    idempotency_key: str  # '' for none
    fingerprint: str
    max_attempts: int | str  # '' for the old run's
    maxlen: int
    wake_channel: str
    queued_ttl_ms: int


class RetryReply(NamedTuple):
    """``retry_run``'s answer: OK / REPLAYED (``run_id``: the new run), CONFLICT
    (``detail`` 'key' or 'retried': ``run_id`` is the run the key or the link names),
    NOT_FOUND, INVALID (``detail``: the old run's status)."""

    code: str
    run_id: str
    detail: str


def _retry_keys(k: QueueKeys, run_id: str, a: RetryArgs) -> tuple[str, ...]:
    return (
        k.run(a.old_id),
        k.effects(a.old_id),
        k.run(a.run_id),
        k.events(a.run_id),
        k.effects(a.run_id),
        k.ready,
        k.runs,
        k.idem(a.idempotency_key),
    )


def _retry_reply(reply: Sequence[Any]) -> RetryReply:
    return RetryReply._make(reply)


RETRY_RUN: Transition[RetryArgs, RetryReply] = Transition(
    "retry_run", _retry_keys, RetryArgs, _retry_reply, durable=True
)


class CancelArgs(NamedTuple):
    """ARGV of ``cancel_run``."""

    run_id: str
    retention: str
    maxlen: int
    channel: str


def _cancel_keys(k: QueueKeys, run_id: str, a: CancelArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.leases, k.delayed, k.idem_prefix)


CANCEL_RUN: Transition[CancelArgs, StatusReply] = Transition(
    "cancel_run", _cancel_keys, CancelArgs, _status_reply, durable=True
)


class DeleteArgs(NamedTuple):
    """ARGV of ``delete_run``."""

    run_id: str


def _delete_keys(k: QueueKeys, run_id: str, a: DeleteArgs) -> tuple[str, ...]:
    return (
        k.run(a.run_id),
        k.events(a.run_id),
        k.effects(a.run_id),
        k.runs,
        k.unclaimed,
        k.idem_prefix,
    )


DELETE_RUN: Transition[DeleteArgs, StatusReply] = Transition(
    "delete_run", _delete_keys, DeleteArgs, _status_reply
)


class ResolveArgs(NamedTuple):
    """ARGV of ``resolve_run``."""

    run_id: str
    action: str
    output: str
    effect_outcome: str
    effect_result: str
    note: str
    retention: str
    maxlen: int
    wake_channel: str


def _resolve_keys(k: QueueKeys, run_id: str, a: ResolveArgs) -> tuple[str, ...]:
    return (
        k.run(a.run_id),
        k.events(a.run_id),
        k.effects(a.run_id),
        k.leases,
        k.ready,
        k.idem_prefix,
    )


RESOLVE_RUN: Transition[ResolveArgs, StatusReply] = Transition(
    "resolve_run", _resolve_keys, ResolveArgs, _status_reply, durable=True
)


class ResumeArgs(NamedTuple):
    """ARGV of ``resume_run``."""

    run_id: str
    resume_input: str
    maxlen: int
    wake_channel: str


def _resume_keys(k: QueueKeys, run_id: str, a: ResumeArgs) -> tuple[str, ...]:
    return (k.run(a.run_id), k.events(a.run_id), k.ready)


RESUME_RUN: Transition[ResumeArgs, StatusReply] = Transition(
    "resume_run", _resume_keys, ResumeArgs, _status_reply, durable=True
)


class ReadEventsArgs(NamedTuple):
    """ARGV of ``read_events``."""

    after: str
    added: int
    max_entries: int


class ReadEventsReply(NamedTuple):
    """Entries trimmed unread (-1: unknown, Redis before 7), and the entries read."""

    missing: int
    entries: list[tuple[str, list[str]]]


def _read_events_keys(k: QueueKeys, run_id: str, a: ReadEventsArgs) -> tuple[str, ...]:
    return (k.events(run_id),)


def _read_events_reply(reply: Sequence[Any]) -> ReadEventsReply:
    _code, missing, entries = reply
    return ReadEventsReply(int(missing), entries)


READ_EVENTS: Transition[ReadEventsArgs, ReadEventsReply] = Transition(
    "read_events", _read_events_keys, ReadEventsArgs, _read_events_reply
)
