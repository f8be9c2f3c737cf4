"""Typed bindings of ``scripts/lua/leases/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import QueueKeys
from app.store.lua.transition import (
    CodeReply,
    LeaseAnswer,
    Transition,
    _answers,
    _code_reply,
    _run_keys,
)


class ClaimArgs(NamedTuple):
    """ARGV of ``claim_runs``."""

    owner_id: str
    max_runs: int
    lease_ttl_ms: int
    maxlen: int
    promote_max: int
    token: str
    # > 0: the worker takes hand-offs; the call re-registers it (includes/claim.lua)
    handoff_ms: int = 0
    # the worker's build, recorded on each run it claims ('' for none)
    build_id: str = ""


class ClaimRow(NamedTuple):
    """One claimed run as ``claim_runs`` returns it (raw strings; '' for none)."""

    id: str
    fence: str
    handler: str
    input: str
    attempt: str
    max_attempts: str
    state: str
    resume_input: str
    budget: str
    traceparent: str
    created_at: str
    prior_fence: str
    prior_owner: str


class ClaimReply(NamedTuple):
    """``claim_runs``' answer: the runs, and when the earliest delayed run is due (or None)."""

    rows: list[ClaimRow]
    next_due_ms: int | None
    # lanes found at a concurrency limit (1 when the queue-wide limit stopped the claim)
    throttled: int = 0
    # the owner's hand-off registration was still there (no run handed to it since)
    unregistered: bool = False
    # the call registered the owner again: one slot asked for is kept for a hand-off
    registered: bool = False


def _claim_keys(k: QueueKeys, run_id: str, a: ClaimArgs) -> tuple[str, ...]:
    return (
        k.ready,
        k.delayed,
        k.leases,
        k.run_prefix,
        k.events_prefix,
        k.claim_receipt_prefix,
    )


def _claim_reply(reply: Sequence[Any]) -> ClaimReply:
    _code, rows, next_due, throttled, unregistered, registered = reply
    due = int(next_due)
    return ClaimReply(
        [ClaimRow._make(row) for row in rows],
        None if due < 0 else due,
        int(throttled),
        unregistered == 1,
        registered == 1,
    )


CLAIM_RUNS: Transition[ClaimArgs, ClaimReply] = Transition(
    "claim_runs", _claim_keys, ClaimArgs, _claim_reply, durable=True
)


class FinishGroup(NamedTuple):
    """One run's outcome in ``finish_runs``' ARGV groups."""

    id: str
    fence: int
    outcome: str
    output: str
    error: str
    retry_delay_ms: int


class FinishArgs(NamedTuple):
    """ARGV of ``finish_runs``."""

    owner_id: str
    retention: str
    maxlen: int
    wake_channel: str
    groups: Sequence[FinishGroup]


def _finish_keys(k: QueueKeys, run_id: str, a: FinishArgs) -> tuple[str, ...]:
    return (k.leases, k.ready, k.delayed, k.run_prefix, k.events_prefix, k.idem_prefix)


FINISH_RUNS: Transition[FinishArgs, list[LeaseAnswer]] = Transition(
    "finish_runs", _finish_keys, FinishArgs, _answers, durable=True, group=FinishGroup
)


class EventPair(NamedTuple):
    """One handler event in ``append_events``' ARGV groups."""

    type: str
    data: str


class AppendArgs(NamedTuple):
    """ARGV of ``append_events``."""

    owner_id: str
    fence: int
    maxlen: int
    groups: Sequence[EventPair]


APPEND_EVENTS: Transition[AppendArgs, CodeReply] = Transition(
    "append_events", _run_keys, AppendArgs, _code_reply, group=EventPair
)


class LeaseGroup(NamedTuple):
    """One held lease in ``release_runs``' and ``renew_leases``' ARGV groups."""

    id: str
    fence: int


class ReleaseArgs(NamedTuple):
    """ARGV of ``release_runs``."""

    owner_id: str
    retention: str
    maxlen: int
    reason: str
    wake_channel: str
    delay_ms: int
    groups: Sequence[LeaseGroup]


def _release_keys(k: QueueKeys, run_id: str, a: ReleaseArgs) -> tuple[str, ...]:
    return (k.leases, k.ready, k.run_prefix, k.events_prefix, k.idem_prefix)


RELEASE_RUNS: Transition[ReleaseArgs, list[LeaseAnswer]] = Transition(
    "release_runs", _release_keys, ReleaseArgs, _answers, durable=True, group=LeaseGroup
)


class RenewArgs(NamedTuple):
    """ARGV of ``renew_leases``."""

    owner_id: str
    lease_ttl_ms: int
    groups: Sequence[LeaseGroup]


def _renew_keys(k: QueueKeys, run_id: str, a: RenewArgs) -> tuple[str, ...]:
    return (k.leases, k.run_prefix)


# not durable: losing a renewal is safe by fencing (see the README), and they are frequent
RENEW_LEASES: Transition[RenewArgs, list[LeaseAnswer]] = Transition(
    "renew_leases", _renew_keys, RenewArgs, _answers, group=LeaseGroup
)


class ActionRow(NamedTuple):
    """What a sweep did to one run: its id, the action, the fence it did it at."""

    id: str
    action: str
    fence: int


def _actions(reply: Sequence[Any]) -> list[ActionRow]:
    _code, rows = reply
    return [ActionRow(row[0], row[1], int(row[2])) for row in rows]


class ReconcileArgs(NamedTuple):
    """ARGV of ``reconcile_expired``."""

    limit: int
    retention: str
    maxlen: int
    wake_channel: str


def _reconcile_keys(k: QueueKeys, run_id: str, a: ReconcileArgs) -> tuple[str, ...]:
    return (k.leases, k.ready, k.run_prefix, k.events_prefix, k.idem_prefix, k.effects_prefix)


RECONCILE_EXPIRED: Transition[ReconcileArgs, list[ActionRow]] = Transition(
    "reconcile_expired", _reconcile_keys, ReconcileArgs, _actions, durable=True
)


class ExpireArgs(NamedTuple):
    """ARGV of ``expire_queued``."""

    limit: int
    retention: str
    maxlen: int


def _expire_keys(k: QueueKeys, run_id: str, a: ExpireArgs) -> tuple[str, ...]:
    return (k.unclaimed, k.ready, k.leases, k.run_prefix, k.events_prefix, k.idem_prefix)


EXPIRE_QUEUED: Transition[ExpireArgs, list[ActionRow]] = Transition(
    "expire_queued", _expire_keys, ExpireArgs, _actions
)
