"""One typed binding per Lua transition: the only place a script's call is spelled out.

A :class:`Transition` names its script, builds its KEYS from :class:`QueueKeys`,
takes a named ARGV record (a ``NamedTuple`` whose field order *is* the ARGV order,
and whose field names are the ones in the script's header: a test compares them),
decodes the reply into named fields, and says whether a failover must not lose
it (``durable``: WAIT for replicas follows it when ``LEASEHOLD_REPLICA_ACKS`` asks).
A script taking groups (``ARGV[5..] id, fence, ...``) ends its record with a
``groups`` field of ``group`` records, flattened in order; one taking segments
(a shared record, then a count of records that follow it: the creates) has a
``subgroup`` too, and its groups are (record, subgroups) pairs.

The store, not its callers, turns a script's status code into the typed error
(:func:`raise_for`: ``RunNotFound``, ``InvalidTransition``, ``LeaseLost``), so
``ScriptCode`` stays inside the store. A batch write cannot raise for one of its
items: it answers one :class:`LeaseAnswer` per lease, and ``LeaseAnswer.LOST`` is
then the one spelling of "fenced out".

Adding a script: write ``scripts/lua/<name>-<keys>.lua`` with its header, add its
ARGV record and reply decoder here, and one ``Transition`` in :data:`TRANSITIONS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, NamedTuple, TypeVar

from app.errors import InvalidTransition, LeaseLost, RunNotFound
from app.store.connection import AsyncRedis
from app.store.keys import GlobalKeys, QueueKeys
from app.store.scripts import ScriptArg, ScriptCall, ScriptCode, Scripts

A = TypeVar("A", bound=tuple[Any, ...])
R = TypeVar("R")

# (the queue's keys, the run the call is about or '' for a queue-wide one, the ARGV record)
KeysOf = Callable[[QueueKeys, str, A], tuple[str, ...]]


class LeaseAnswer(StrEnum):
    """What a fenced batch write (finish, release, renew) answered for one lease.

    OK: written (renew: renewed); RETRY: requeued for another attempt (finish);
    CANCEL: a client asked to cancel (renew: renewed, stop now; finish: it ended
    cancelled instead of being retried or parked); LOST: fenced out, nothing written.
    """

    OK = "OK"
    RETRY = "RETRY"
    CANCEL = "CANCEL"
    LOST = "LOST"


@dataclass(frozen=True)
class Transition(Generic[A, R]):
    """One Lua script as Python calls it: name, KEYS, ARGV record, reply, durability."""

    name: str
    keys: KeysOf[A]
    argv: type[A]
    decode: Callable[[Any], R]
    durable: bool = False
    # the record each group of a variadic ARGV tail is (the ARGV record's last field)
    group: type[tuple[Any, ...]] | None = None
    # set: each group is a pair (a `group` record, a sequence of `subgroup` records), sent
    # as the record's fields, the count of the sequence, then its records' fields
    subgroup: type[tuple[Any, ...]] | None = None

    def call(self, keys: QueueKeys, args: A, run_id: str = "") -> ScriptCall:
        """The script call for ``args`` on ``keys``' queue (``run_id``: the run it is about)."""
        return ScriptCall(
            self.name, self.keys(keys, run_id, args), self.flatten(args), self.durable
        )

    async def send(
        self, scripts: Scripts, client: AsyncRedis, keys: QueueKeys, args: A, run_id: str = ""
    ) -> R:
        """Run the script once and decode its reply (WAIT follows when it is durable)."""
        return self.decode(await scripts.run(client, self.call(keys, args, run_id)))

    def flatten(self, args: A) -> list[ScriptArg]:
        """The ARGV list: the record's fields in order, the groups' fields after them."""
        values: list[Any] = list(args)
        if self.group is None:
            return values
        groups = values.pop()
        if self.subgroup is None:
            for group in groups:
                values.extend(group)
            return values
        for head, subgroups in groups:
            values.extend(head)
            values.append(len(subgroups))
            for subgroup in subgroups:
                values.extend(subgroup)
        return values


def raise_for(
    code: str, *, run_id: str, status: str = "", action: str = "", fence: int = 0
) -> None:
    """Raise the typed error a script's status code means; return for every other code.

    The one code-to-exception mapping: NOT_FOUND is :class:`RunNotFound`, INVALID
    :class:`InvalidTransition` (``status`` says what the run is), LOST
    :class:`LeaseLost` (``fence`` is the one that no longer holds).
    """
    if code == ScriptCode.NOT_FOUND:
        raise RunNotFound(run_id)
    if code == ScriptCode.INVALID:
        raise InvalidTransition(run_id, status, action)
    if code == ScriptCode.LOST:
        raise LeaseLost(run_id, fence)


# code -> member: ``LeaseAnswer(code)`` goes through EnumType.__call__, per run of every batch
_ANSWERS = {answer.value: answer for answer in LeaseAnswer}


def _answers(reply: Sequence[str]) -> list[LeaseAnswer]:
    known = _ANSWERS.get
    # an unknown code still raises ValueError, through the enum
    return [known(code) or LeaseAnswer(code) for code in reply]


# --- create_run -------------------------------------------------------------------


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


assert CreateReply._fields == ("code", "run_id", "created_at_ms"), "_create_replies: by position"


def _create_replies(reply: Sequence[Any]) -> list[CreateReply]:
    # tuple.__new__ with the class: a NamedTuple's own __new__ is a Python function, a
    # frame per run of every batch; the same CreateReply
    make = tuple.__new__
    return [
        make(CreateReply, (reply[i], reply[i + 1], int(reply[i + 2])))
        for i in range(0, len(reply), 3)
    ]


CREATE_RUNS: Transition[CreateArgs, list[CreateReply]] = Transition(
    "create_runs",
    _create_many_keys,
    CreateArgs,
    _create_replies,
    durable=True,
    group=CreateShape,
    subgroup=CreateRun,
)


# --- claim_runs -------------------------------------------------------------------


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


# --- finish_runs ------------------------------------------------------------------


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


# --- retry_run --------------------------------------------------------------------


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


# --- one run, by a client: cancel, delete, resolve, resume --------------------------


class StatusReply(NamedTuple):
    """``{code, status}``: OK (status afterwards), NOT_FOUND, INVALID (status: what it is)."""

    code: str
    status: str


def _status_reply(reply: Sequence[Any]) -> StatusReply:
    code, status = reply
    return StatusReply(code, status)


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


# --- read_events ------------------------------------------------------------------


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


# --- queues -----------------------------------------------------------------------


class DeclareArgs(NamedTuple):
    """ARGV of ``declare_queue``."""

    name: str
    max_queues: int


class DeclareReply(NamedTuple):
    """OK (declared now), REPLAYED (declared already), CONFLICT (max_queues reached)."""

    code: str
    declared: int


def _declare_keys(k: QueueKeys, run_id: str, a: DeclareArgs) -> tuple[str, ...]:
    return (GlobalKeys(k.prefix).queues,)


def _declare_reply(reply: Sequence[Any]) -> DeclareReply:
    code, count = reply
    return DeclareReply(code, int(count))


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


# --- fenced writes of one run: events, checkpoints, effects ------------------------


class CodeReply(NamedTuple):
    """``{code, value}``: a status code and one value (an id, a count, a payload)."""

    code: str
    value: str


def _code_reply(reply: Sequence[Any]) -> CodeReply:
    code, value = reply
    return CodeReply(code, "" if value is None else str(value))


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


def _run_keys(k: QueueKeys, run_id: str, a: Any) -> tuple[str, ...]:
    return (k.run(run_id), k.events(run_id))


APPEND_EVENTS: Transition[AppendArgs, CodeReply] = Transition(
    "append_events", _run_keys, AppendArgs, _code_reply, group=EventPair
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


# --- fenced batch writes and sweeps of a queue -------------------------------------


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


# --- rate limits (store/ratelimits.py) ------------------------------------------
# A bucket call's subject (``run_id``) is the bucket's Redis key, built by the store: a
# handler bucket (GlobalKeys.bucket) or a queue's start bucket (QueueKeys.start_bucket).
# Declarations are a cross-queue key: GlobalKeys of the QueueKeys' prefix.


class TakeArgs(NamedTuple):
    """ARGV of ``take_tokens``."""

    limit: int
    period_ms: int
    burst: int
    cost: int
    max_wait_ms: int


class TakeReply(NamedTuple):
    """``take_tokens``' answer: taken (OK) or not (LIMITED), by the Redis clock."""

    granted: bool
    wait_ms: int
    now_ms: int
    remaining: int


def _bucket_keys(k: QueueKeys, bucket_key: str, a: object) -> tuple[str, ...]:
    return (bucket_key,)


def _take_reply(reply: Sequence[Any]) -> TakeReply:
    code, wait_ms, now_ms, remaining = reply
    return TakeReply(code == ScriptCode.OK, int(wait_ms), int(now_ms), int(remaining))


TAKE_TOKENS: Transition[TakeArgs, TakeReply] = Transition(
    "take_tokens", _bucket_keys, TakeArgs, _take_reply
)


class PushArgs(NamedTuple):
    """ARGV of ``push_bucket``."""

    limit: int
    period_ms: int
    burst: int
    retry_after_ms: int


class PushReply(NamedTuple):
    """``push_bucket``'s answer: when a token passes again, and now (both Redis clock, ms)."""

    until_ms: int
    now_ms: int


def _push_reply(reply: Sequence[Any]) -> PushReply:
    _code, until_ms, now_ms = reply
    return PushReply(int(until_ms), int(now_ms))


PUSH_BUCKET: Transition[PushArgs, PushReply] = Transition(
    "push_bucket", _bucket_keys, PushArgs, _push_reply
)


class DeclareRateLimitArgs(NamedTuple):
    """ARGV of ``declare_rate_limit``."""

    name: str
    spec: str
    max_keys: int


def _declarations_keys(k: QueueKeys, subject: str, a: object) -> tuple[str, ...]:
    return (GlobalKeys(k.prefix).rate_limits,)


DECLARE_RATE_LIMIT: Transition[DeclareRateLimitArgs, DeclareReply] = Transition(
    "declare_rate_limit", _declarations_keys, DeclareRateLimitArgs, _declare_reply
)


# --- commit_operation -------------------------------------------------------------


class CommitOperationArgs(NamedTuple):
    """ARGV of ``commit_operation``: one step's progress of a bulk operation."""

    operation_id: str
    driver: str
    lease_ms: int
    retention_ms: int
    fields: str  # JSON object: strings and finite numbers
    force: int  # 1: whoever drives it (a cancel)


class CommitOperationReply(NamedTuple):
    """OK, NOT_FOUND, INVALID (``detail``: its status) or CONFLICT (``detail``: the driver)."""

    code: str
    detail: str


def _commit_operation_keys(k: QueueKeys, run_id: str, a: CommitOperationArgs) -> tuple[str, ...]:
    # an operation spans queues: its one key is a global one, built from the prefix alone
    return (GlobalKeys(k.prefix).operation(a.operation_id),)


def _commit_operation_reply(reply: Sequence[Any]) -> CommitOperationReply:
    return CommitOperationReply._make(reply)


COMMIT_OPERATION: Transition[CommitOperationArgs, CommitOperationReply] = Transition(
    "commit_operation", _commit_operation_keys, CommitOperationArgs, _commit_operation_reply
)


# --- park_run / signal_run (durable waits: store/waits.py) --------------------------


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


# --- flow control: set_limits, set_priority, recount_slots ------------------------


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


# --- put_schedule / fire_schedule -------------------------------------------------


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


# --- spawn_child ------------------------------------------------------------------


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


# --- join_children / child_ended / cancel_children / take_outbox -------------------


class ChildIdGroup(NamedTuple):
    """One child id in a variadic ARGV tail."""

    child_id: str


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


TRANSITIONS: dict[str, Transition[Any, Any]] = {
    t.name: t
    for t in (
        CREATE_RUN,
        CREATE_RUNS,
        CLAIM_RUNS,
        FINISH_RUNS,
        RETRY_RUN,
        CANCEL_RUN,
        DELETE_RUN,
        RESOLVE_RUN,
        RESUME_RUN,
        READ_EVENTS,
        DECLARE_QUEUE,
        UNDECLARE_QUEUE,
        APPEND_EVENTS,
        CHECKPOINT_RUN,
        START_EFFECT,
        RECORD_EFFECT,
        RELEASE_RUNS,
        RENEW_LEASES,
        RECONCILE_EXPIRED,
        EXPIRE_QUEUED,
        TAKE_TOKENS,
        PUSH_BUCKET,
        DECLARE_RATE_LIMIT,
        COMMIT_OPERATION,
        PARK_RUN,
        SIGNAL_RUN,
        SET_LIMITS,
        SET_PRIORITY,
        RECOUNT_SLOTS,
        PUT_SCHEDULE,
        FIRE_SCHEDULE,
        SPAWN_CHILD,
        JOIN_CHILDREN,
        CHILD_ENDED,
        CANCEL_CHILDREN,
        TAKE_OUTBOX,
    )
}
"""Every binding by script name (a test holds it to ``scripts/lua``)."""
