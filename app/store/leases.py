"""Executor-side transitions: claim, renew, append, finish, release, reconcile.

Every write a worker makes carries its (owner_id, fence) and is answered LOST
when another owner has taken the run since; the worker then stops at once.
Batch calls take many runs of one queue per round trip: a claim pops up to N
ready runs, a renewal extends every lease the worker holds on the queue, and a
finish is pipelined with the claim of the next runs (BullMQ's moveToFinished).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings
from app.store.connection import AsyncRedis, SyncRedis
from app.store.keys import QueueKeys
from app.store.retention import Retention
from app.store.scripts import ScriptCall, Scripts
from app.store.transitions import (
    APPEND_EVENTS,
    CLAIM_RUNS,
    EXPIRE_QUEUED,
    FINISH_RUNS,
    RECONCILE_EXPIRED,
    RELEASE_RUNS,
    RENEW_LEASES,
    AppendArgs,
    ClaimArgs,
    EventPair,
    ExpireArgs,
    FinishArgs,
    FinishGroup,
    LeaseAnswer,
    LeaseGroup,
    ReconcileArgs,
    ReleaseArgs,
    RenewArgs,
    raise_for,
)

RECONCILE_BATCH = 500
PROMOTE_MAX = 1000


@dataclass(frozen=True)
class ClaimedRun:
    """A run this worker now holds; ``fence`` is its token for every write."""

    id: str
    queue: str
    fence: int
    handler: str
    input: Any
    attempt: int
    max_attempts: int
    state: Any
    resume_input: Any
    budget: dict[str, Any] = field(default_factory=dict)
    # for tracing: the run's stored trace context, when it was created, and the run's
    # previous claim (a takeover's attempt links to the attempt it took over)
    traceparent: str | None = None
    created_at_ms: int | None = None
    prior_fence: int | None = None
    prior_owner: str | None = None


@dataclass(frozen=True)
class Claim:
    """What a claim returned: the runs, and when the next delayed run is due."""

    runs: list[ClaimedRun]
    next_due_ms: int | None
    # lanes the claim found at a concurrency limit (1 when the queue-wide limit stopped it)
    throttled: int = 0
    # why Redis refused the claim (the outcomes sent with it were written regardless)
    refused: Exception | None = None


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the worker reports it to ``finish_runs``."""

    run_id: str
    fence: int
    status: str  # succeeded | failed | cancelled
    output_json: str = ""
    error_json: str = ""
    retry_delay_ms: int = -1

    def group(self) -> FinishGroup:
        """The ARGV group finish_runs takes per run."""
        return FinishGroup(
            self.run_id,
            self.fence,
            self.status,
            self.output_json,
            self.error_json,
            self.retry_delay_ms,
        )


@dataclass(frozen=True)
class ReconcileAction:
    """What a reconciler did to one expired lease."""

    run_id: str
    action: str  # orphaned | requeued | cancelled | reconciliation_required | expired
    fence: int


@dataclass(frozen=True)
class HeldLease:
    """A lease as the heartbeat sees it: which run, at which fence."""

    run_id: str
    fence: int


def new_claim_token() -> str:
    """A claim's request token: random, so two claims never share a receipt by accident."""
    return secrets.token_hex(8)


def _json_or_none(raw: str) -> Any:
    return json.loads(raw) if raw else None


class LeaseStore:
    """Holds an async Redis client and performs the worker's fenced transitions."""

    def __init__(
        self,
        client: AsyncRedis,
        *,
        scripts: Scripts,
        prefix: str,
        lease_ttl_ms: int,
        retention: Retention,
        events_maxlen: int,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.lease_ttl_ms = lease_ttl_ms
        self.retention = retention
        self.events_maxlen = events_maxlen

    @classmethod
    def for_settings(cls, client: AsyncRedis, scripts: Scripts, settings: Settings) -> LeaseStore:
        """A store on ``client`` with the lease TTL, retention and stream cap of ``settings``."""
        return cls(
            client,
            scripts=scripts,
            prefix=settings.prefix,
            lease_ttl_ms=settings.lease_ttl_ms,
            retention=Retention.for_settings(settings),
            events_maxlen=settings.events_maxlen,
        )

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)

    def _claim_call(self, queue: str, owner: str, count: int, token: str) -> ScriptCall:
        args = ClaimArgs(owner, count, self.lease_ttl_ms, self.events_maxlen, PROMOTE_MAX, token)
        return CLAIM_RUNS.call(self.keys(queue), args)

    def _finish_call(self, queue: str, owner: str, outcomes: Sequence[Outcome]) -> ScriptCall:
        keys = self.keys(queue)
        groups = [outcome.group() for outcome in outcomes]
        args = FinishArgs(
            owner, self.retention.script_arg(), self.events_maxlen, keys.wake_channel, groups
        )
        return FINISH_RUNS.call(keys, args)

    def _parse_claim(self, queue: str, raw: list[Any]) -> Claim:
        reply = CLAIM_RUNS.decode(raw)
        runs = [
            ClaimedRun(
                id=row.id,
                queue=queue,
                fence=int(row.fence),
                handler=row.handler,
                input=_json_or_none(row.input),
                attempt=int(row.attempt),
                max_attempts=int(row.max_attempts),
                state=_json_or_none(row.state),
                resume_input=_json_or_none(row.resume_input),
                budget=_json_or_none(row.budget) or {},
                traceparent=row.traceparent or None,
                created_at_ms=int(row.created_at) if row.created_at else None,
                prior_fence=int(row.prior_fence) if row.prior_fence else None,
                prior_owner=row.prior_owner or None,
            )
            for row in reply.rows
        ]
        return Claim(runs, reply.next_due_ms, reply.throttled)

    async def claim(self, queue: str, owner: str, count: int, token: str | None = None) -> Claim:
        """Claim up to ``count`` ready runs (0 only promotes due retries).

        ``token`` makes the claim idempotent for one lease TTL: calling again with
        the same token (because the first answer was lost) returns what the first
        call claimed instead of claiming more. None: a fresh token.
        """
        call = self._claim_call(queue, owner, count, token or new_claim_token())
        return self._parse_claim(queue, await self.scripts.run(self.client, call))

    async def finish_and_claim(
        self,
        queue: str,
        owner: str,
        outcomes: Sequence[Outcome],
        count: int,
        token: str | None = None,
    ) -> tuple[list[LeaseAnswer], Claim]:
        """Record outcomes and claim up to ``count`` more runs, in one round trip.

        Returns one answer per outcome (OK, RETRY, CANCEL or LOST), then the claim. ``token``
        as for :meth:`claim`: a caller that retries after a failed round trip passes
        the same one, so runs claimed by a call whose reply was lost come back.

        Redis can refuse the claim and still take the outcomes (past ``maxmemory``
        a claim is refused whole, a terminal write is not): the codes are then
        returned with an empty claim whose ``refused`` holds the error. A refused
        terminal write raises, as does any failure of the round trip itself.
        """
        calls = []
        if outcomes:
            calls.append(self._finish_call(queue, owner, outcomes))
        calls.append(self._claim_call(queue, owner, count, token or new_claim_token()))
        results = await self.scripts.pipeline(self.client, calls, raise_on_error=False)
        if outcomes and isinstance(results[0], Exception):
            raise results[0]
        codes = FINISH_RUNS.decode(results[0]) if outcomes else []
        if isinstance(results[-1], Exception):
            return codes, Claim([], None, refused=results[-1])
        return codes, self._parse_claim(queue, results[-1])

    async def append_events(
        self, queue: str, run_id: str, *, owner: str, fence: int, events: Sequence[tuple[str, str]]
    ) -> str:
        """Append handler events (type, data json) in order; returns the last event's id.

        Raises :class:`~app.errors.LeaseLost` when fenced out (nothing was written).
        """
        args = AppendArgs(owner, fence, self.events_maxlen, [EventPair(*e) for e in events])
        reply = await APPEND_EVENTS.send(self.scripts, self.client, self.keys(queue), args, run_id)
        raise_for(reply.code, run_id=run_id, fence=fence)
        return reply.value

    async def release(
        self,
        queue: str,
        owner: str,
        leases: Sequence[HeldLease],
        reason: str,
        *,
        delay_ms: int = 0,
    ) -> list[LeaseAnswer]:
        """Hand runs back to the queue (fence+1); one answer per lease, OK or LOST.

        ``delay_ms`` 0 puts them at the head of the line (a drain); more keeps them in
        the delayed set that long by the Redis clock (a rate limit's token is due
        then). The attempt count is kept either way.
        """
        keys = self.keys(queue)
        args = ReleaseArgs(
            owner,
            self.retention.script_arg(),
            self.events_maxlen,
            reason,
            keys.wake_channel,
            delay_ms,
            [LeaseGroup(lease.run_id, lease.fence) for lease in leases],
        )
        return await RELEASE_RUNS.send(self.scripts, self.client, keys, args)

    async def reconcile(self, queue: str, limit: int = RECONCILE_BATCH) -> list[ReconcileAction]:
        """Apply the lease-expiry policy to up to ``limit`` expired leases of a queue."""
        keys = self.keys(queue)
        args = ReconcileArgs(
            limit, self.retention.script_arg(), self.events_maxlen, keys.wake_channel
        )
        rows = await RECONCILE_EXPIRED.send(self.scripts, self.client, keys, args)
        return [ReconcileAction(row.id, row.action, row.fence) for row in rows]

    async def expire_queued(
        self, queue: str, limit: int = RECONCILE_BATCH
    ) -> list[ReconcileAction]:
        """End up to ``limit`` runs of a queue that nobody claimed within their queued TTL.

        Each becomes ``expired`` with one terminal event; a queue no worker serves
        holds no run for longer than its ``queued_ttl_s``.
        """
        args = ExpireArgs(limit, self.retention.script_arg(), self.events_maxlen)
        rows = await EXPIRE_QUEUED.send(self.scripts, self.client, self.keys(queue), args)
        return [ReconcileAction(row.id, row.action, row.fence) for row in rows]


class LeaseRenewer:
    """Renews leases from the heartbeat thread, on its own blocking connection.

    Kept apart from the event loop on purpose: a handler that blocks the loop
    must not stop its lease from being renewed (slow is not dead).
    """

    def __init__(
        self, client: SyncRedis, *, scripts: Scripts, prefix: str, lease_ttl_ms: int
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.lease_ttl_ms = lease_ttl_ms

    def renew(self, queue: str, owner: str, leases: Sequence[HeldLease]) -> dict[str, LeaseAnswer]:
        """Renew every lease given, in one round trip: run id -> OK, CANCEL or LOST."""
        if not leases:
            return {}
        args = RenewArgs(
            owner, self.lease_ttl_ms, [LeaseGroup(lease.run_id, lease.fence) for lease in leases]
        )
        call = RENEW_LEASES.call(QueueKeys(self.prefix, queue), args)
        answers = RENEW_LEASES.decode(self.scripts.run_sync(self.client, call))
        return {lease.run_id: answer for lease, answer in zip(leases, answers, strict=True)}
