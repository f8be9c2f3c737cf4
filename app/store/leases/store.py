"""Executor-side transitions: claim, renew, append, finish, release, reconcile.

Every write a worker makes carries its :class:`Lease` and is answered LOST
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

from app.models import RunStatus
from app.store.context import Store
from app.store.keys import QueueKeys
from app.store.leases.bindings import (
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
    LeaseGroup,
    ReconcileArgs,
    ReleaseArgs,
    RenewArgs,
)
from app.store.lua.scripts import ScriptCall, Scripts
from app.store.lua.transition import LeaseAnswer, raise_for
from app.store.redis.connection import SyncRedis

RECONCILE_BATCH = 500
PROMOTE_MAX = 1000


@dataclass(frozen=True, slots=True)
class Lease:
    """The fenced identity of one held run: which run, on which queue, held by whom, at
    which fence. A claim returns it, and every write its owner makes takes it: Redis
    answers LOST (the store raises :class:`~app.errors.LeaseLost`) once another owner
    holds the run or the fence moved on.
    """

    queue: str
    run_id: str
    owner_id: str
    fence: int


@dataclass(slots=True)
class ClaimedRun:
    """A run this worker now holds: its :class:`Lease`, and what its handler is given.

    Read-only by convention, not ``frozen``: one is built per claimed run, and a frozen
    dataclass's ``__init__`` sets each of its 13 fields through ``object.__setattr__``.
    """

    lease: Lease
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

    @property
    def id(self) -> str:
        """The run's id (its lease's)."""
        return self.lease.run_id

    @property
    def queue(self) -> str:
        """The run's queue (its lease's)."""
        return self.lease.queue

    @property
    def fence(self) -> int:
        """The fence this claim holds the run at (its lease's)."""
        return self.lease.fence


@dataclass(frozen=True)
class Claim:
    """What a claim returned: the runs, and when the next delayed run is due."""

    runs: list[ClaimedRun]
    next_due_ms: int | None
    # lanes the claim found at a concurrency limit (1 when the queue-wide limit stopped it)
    throttled: int = 0
    # why Redis refused the claim (the outcomes sent with it were written regardless)
    refused: Exception | None = None
    # the hand-off registration (``handoff_ms`` > 0): the earlier one was still there,
    # and this claim made a new one (it kept one of the slots asked for)
    unregistered: bool = False
    registered: bool = False


@dataclass(slots=True)
class Outcome:
    """How a held run ended, as its owner reports it to ``finish_runs``.

    ``status`` is succeeded, failed or cancelled, or waiting_human (the watchdog
    escalated); ``retry_delay_ms`` >= 0 asks for a retry when attempts remain.
    Read-only by convention, not ``frozen``: one is made per run (as :class:`ClaimedRun`).
    """

    lease: Lease
    status: RunStatus
    output_json: str = ""
    error_json: str = ""
    retry_delay_ms: int = -1

    def group(self) -> FinishGroup:
        """The ARGV group finish_runs takes per run."""
        return FinishGroup(
            self.lease.run_id,
            self.lease.fence,
            self.status,
            self.output_json,
            self.error_json,
            self.retry_delay_ms,
        )


@dataclass(frozen=True)
class ReconcileAction:
    """What a reconciler did to one expired lease."""

    run_id: str
    action: str  # orphaned | requeued | cancelled | reconciliation_required | released | expired
    fence: int


def new_claim_token() -> str:
    """A claim's request token: random, so two claims never share a receipt by accident."""
    return secrets.token_hex(8)


def _json_or_none(raw: str) -> Any:
    if not raw:
        return None
    # the commonest input, decoded without the JSON decoder (a new dict: handlers may mutate)
    return {} if raw == "{}" else json.loads(raw)


def _claimed_run(queue: str, owner_id: str, row: Sequence[Any]) -> ClaimedRun:
    """One claim_runs row (ClaimRow's field order; strings, or numbers from an inbox's
    JSON) as the run this worker now holds, unpacked once, passed positionally."""
    (
        run_id,
        fence,
        handler,
        run_input,
        attempt,
        max_attempts,
        state,
        resume_input,
        budget,
        traceparent,
        created_at,
        prior_fence,
        prior_owner,
    ) = row
    return ClaimedRun(
        Lease(queue, run_id, owner_id, int(fence)),
        handler,
        _json_or_none(run_input),
        int(attempt),
        int(max_attempts),
        _json_or_none(state) if state else None,
        _json_or_none(resume_input) if resume_input else None,
        (_json_or_none(budget) or {}) if budget else {},
        traceparent or None,
        int(created_at) if created_at else None,
        int(prior_fence) if prior_fence else None,
        prior_owner or None,
    )


class LeaseStore(Store):
    """Performs the worker's fenced transitions on a :class:`StoreContext`."""

    # the build every claim of this worker records on its runs ('' for none); the worker
    # sets it once, before its first claim
    build_id: str = ""

    def _claim_call(
        self, queue: str, owner_id: str, count: int, token: str, handoff_ms: int = 0
    ) -> ScriptCall:
        ctx = self.ctx
        args = ClaimArgs(
            owner_id,
            count,
            ctx.lease_ttl_ms,
            ctx.events_maxlen,
            PROMOTE_MAX,
            token,
            handoff_ms,
            self.build_id,
        )
        return CLAIM_RUNS.call(self.keys(queue), args)

    def _finish_call(self, queue: str, owner_id: str, outcomes: Sequence[Outcome]) -> ScriptCall:
        keys, ctx = self.keys(queue), self.ctx
        groups = [outcome.group() for outcome in outcomes]
        args = FinishArgs(
            owner_id, ctx.retention.script_arg(), ctx.events_maxlen, keys.wake_channel, groups
        )
        return FINISH_RUNS.call(keys, args)

    def _parse_claim(self, queue: str, owner_id: str, raw: list[Any]) -> Claim:
        reply = CLAIM_RUNS.decode(raw)
        runs = [_claimed_run(queue, owner_id, row) for row in reply.rows]
        return Claim(
            runs,
            reply.next_due_ms,
            reply.throttled,
            unregistered=reply.unregistered,
            registered=reply.registered,
        )

    def handed_off(self, queue: str, owner_id: str, raw: str | bytes) -> ClaimedRun:
        """A run a create handed to this worker: its inbox row (claim_runs' row, as JSON)."""
        return _claimed_run(queue, owner_id, json.loads(raw))

    async def claim(
        self,
        queue: str,
        owner_id: str,
        count: int,
        token: str | None = None,
        *,
        handoff_ms: int = 0,
    ) -> Claim:
        """Claim up to ``count`` ready runs (0 only promotes due retries).

        ``token`` makes the claim idempotent for one lease TTL: calling again with
        the same token (because the first answer was lost) returns what the first
        call claimed instead of claiming more. None: a fresh token. ``handoff_ms`` > 0
        removes the owner's hand-off registration and, when the claim comes back
        short, registers it again for that long (:attr:`Claim.registered`).
        """
        call = self._claim_call(queue, owner_id, count, token or new_claim_token(), handoff_ms)
        return self._parse_claim(queue, owner_id, await self.scripts.run(self.client, call))

    async def finish_and_claim(
        self,
        queue: str,
        owner_id: str,
        outcomes: Sequence[Outcome],
        count: int,
        token: str | None = None,
        *,
        handoff_ms: int = 0,
    ) -> tuple[list[LeaseAnswer], Claim]:
        """Record outcomes and claim up to ``count`` more runs, in one round trip.

        Returns one answer per outcome (OK, RETRY, CANCEL or LOST), then the claim. ``token``
        as for :meth:`claim`: a caller that retries after a failed round trip passes
        the same one, so runs claimed by a call whose reply was lost come back;
        ``handoff_ms`` as for :meth:`claim`.

        Redis can refuse the claim and still take the outcomes (past ``maxmemory``
        a claim is refused whole, a terminal write is not): the codes are then
        returned with an empty claim whose ``refused`` holds the error. A refused
        terminal write raises, as does any failure of the round trip itself.
        """
        calls = []
        if outcomes:
            calls.append(self._finish_call(queue, owner_id, outcomes))
        calls.append(
            self._claim_call(queue, owner_id, count, token or new_claim_token(), handoff_ms)
        )
        results = await self.scripts.pipeline(self.client, calls, raise_on_error=False)
        if outcomes and isinstance(results[0], Exception):
            raise results[0]
        codes = FINISH_RUNS.decode(results[0]) if outcomes else []
        if isinstance(results[-1], Exception):
            return codes, Claim([], None, refused=results[-1])
        return codes, self._parse_claim(queue, owner_id, results[-1])

    async def append_events(self, lease: Lease, events: Sequence[tuple[str, str]]) -> str:
        """Append handler events (type, data json) in order; returns the last event's id.

        Raises :class:`~app.errors.LeaseLost` when fenced out (nothing was written).
        """
        pairs = [EventPair(*event) for event in events]
        args = AppendArgs(lease.owner_id, lease.fence, self.ctx.events_maxlen, pairs)
        keys = self.keys(lease.queue)
        reply = await APPEND_EVENTS.send(self.scripts, self.client, keys, args, lease.run_id)
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)
        return reply.value

    async def release(
        self, leases: Sequence[Lease], reason: str, *, delay_ms: int = 0
    ) -> list[LeaseAnswer]:
        """Hand runs of one queue and owner back (fence+1); one answer per lease, OK or LOST.

        ``delay_ms`` 0 puts them at the head of the line (a drain); more keeps them in
        the delayed set that long by the Redis clock (a rate limit's token is due
        then). The attempt count is kept either way.
        """
        queue, owner_id = one_holder(leases)
        keys = self.keys(queue)
        args = ReleaseArgs(
            owner_id,
            self.ctx.retention.script_arg(),
            self.ctx.events_maxlen,
            reason,
            keys.wake_channel,
            delay_ms,
            [LeaseGroup(lease.run_id, lease.fence) for lease in leases],
        )
        return await RELEASE_RUNS.send(self.scripts, self.client, keys, args)

    async def confirm(self, lease: Lease) -> LeaseAnswer:
        """Renew one lease from the event loop: OK or CANCEL (renewed), or LOST (another
        owner has the run, or it ended). The check before starting a run whose lease may
        have lapsed while its claim's row waited (a hand-off row read late)."""
        args = RenewArgs(
            lease.owner_id, self.ctx.lease_ttl_ms, [LeaseGroup(lease.run_id, lease.fence)]
        )
        keys = self.keys(lease.queue)
        (answer,) = await RENEW_LEASES.send(self.scripts, self.client, keys, args, lease.run_id)
        return answer

    async def reconcile(self, queue: str, limit: int = RECONCILE_BATCH) -> list[ReconcileAction]:
        """Apply the lease-expiry policy to up to ``limit`` expired leases of a queue."""
        keys, ctx = self.keys(queue), self.ctx
        args = ReconcileArgs(
            limit, ctx.retention.script_arg(), ctx.events_maxlen, keys.wake_channel
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
        args = ExpireArgs(limit, self.ctx.retention.script_arg(), self.ctx.events_maxlen)
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

    def renew(self, leases: Sequence[Lease]) -> dict[str, LeaseAnswer]:
        """Renew leases of one queue and owner, in one round trip: run id -> OK, CANCEL or LOST."""
        if not leases:
            return {}
        queue, owner_id = one_holder(leases)
        groups = [LeaseGroup(lease.run_id, lease.fence) for lease in leases]
        call = RENEW_LEASES.call(
            QueueKeys(self.prefix, queue), RenewArgs(owner_id, self.lease_ttl_ms, groups)
        )
        answers = RENEW_LEASES.decode(self.scripts.run_sync(self.client, call))
        return {lease.run_id: answer for lease, answer in zip(leases, answers, strict=True)}


def one_holder(leases: Sequence[Lease]) -> tuple[str, str]:
    """The (queue, owner_id) every lease of a batch shares: one script call is one queue's.

    Raises ValueError for an empty batch or one that mixes queues or owners.
    """
    holders = {(lease.queue, lease.owner_id) for lease in leases}
    if len(holders) != 1:
        raise ValueError(f"a batch of leases must share one queue and owner, got {holders}")
    return holders.pop()
