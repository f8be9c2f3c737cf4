"""``RunContext``: everything a handler sees of the run it executes.

Handlers get identity (run id, attempt, fence), their input, a cancellation
signal, ways to report what they do (``emit``, ``progress``), and ways to make
a later attempt continue instead of starting over (``checkpoint``, ``effect``:
see :mod:`app.executor.effects`). They see nothing of the worker's machinery:
leases, heartbeats and Redis stay behind this object.

The fence is handed out on purpose: pass ``ctx.fence`` to downstream systems
that can reject writes from a stale executor (Kleppmann's fencing token).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Unpack

from app.errors import ConfigurationError, SpawnRefused
from app.executor.reasons import StopReason
from app.namespaces import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    # each helper's module is imported by the helper's first use (RunHelpers): a handler
    # module imports this one before a worker's first claim, and children, effects, waits,
    # rate limits and supervision are ~60 ms of a start that claims without them
    from app.executor.children import Child, Family, FamilyDeps, SpawnOptions
    from app.executor.effects import EffectFn, EffectLedger
    from app.executor.events import EventSink
    from app.executor.helper_stores import HelperStores
    from app.executor.lease_tokens import LeaseTokens
    from app.executor.rates import Grant, RateLimiter
    from app.executor.waits import Waits
    from app.store.leases.store import ClaimedRun, LeaseStore
    from app.store.signing.store import SigningKeys
    from app.supervision.config import Supervision
    from app.supervision.operation import Operation
    from app.supervision.steps import StepBudget


@dataclass(frozen=True)
class HelperDeps:
    """What every run's helpers are built from: one per worker, shared by all its runs."""

    lease_store: LeaseStore
    # the progress, wait and rate-limit stores, each made by the first run that uses it
    stores: HelperStores
    # the longest wait for rate-limit tokens (ctx.rate_limit) that holds a lease
    rate_limit_max_wait_ms: int
    supervision: Supervision
    max_event_bytes: int
    max_checkpoint_bytes: int
    max_wait_s: float = 30 * 24 * 3600.0
    # builds what ctx.spawn needs (child store, registry, bounds) on the first spawn, so
    # their modules are not a worker's start-up; None: this worker cannot spawn
    family: Callable[[], FamilyDeps] | None = None
    # the signing room, built by the first ctx.lease_token (its modules load cryptography)
    signing: Callable[[], SigningKeys] | None = None
    lease_token_max_ms: int = 3_600_000
    # the namespace this worker serves: the lease tokens' ``ns`` claim
    namespace: str = DEFAULT_NAMESPACE


class RunHelpers:
    """One run's helpers, each built on its first use: the one lazy pattern of a run.

    Most handlers use none of them (a no-op run touched none, and building all six
    was 13 % of a worker's CPU at thousands of runs a second), so each is a
    :func:`functools.cached_property`: the event sink, the effect ledger, the durable
    waits, the rate limiter, the step budget and the run's children. They are reached from the event
    loop only (the ``*_sync`` methods of :class:`RunContext` hand a coroutine to the
    loop), so no two threads ever build one. A new helper goes here, the same way.
    """

    def __init__(
        self,
        claimed: ClaimedRun,
        deps: HelperDeps,
        *,
        stop: Callable[[StopReason], None],
        interrupt: Callable[[StopReason], None],
        trace_parent: str | None,
    ) -> None:
        """``stop`` interrupts the run from outside its call, ``interrupt`` from inside it.

        ``trace_parent`` is the attempt's span context, for effects called from threads.
        """
        self.claimed = claimed
        self.deps = deps
        self._stop = stop
        self._interrupt = interrupt
        self._trace_parent = trace_parent

    @functools.cached_property
    def sink(self) -> EventSink:
        """The run's ordered, batched, fenced event appends."""
        from app.executor.events import EventSink

        return EventSink(
            self.deps.lease_store,
            self.claimed.lease,
            max_event_bytes=self.deps.max_event_bytes,
            on_lost=functools.partial(self._stop, StopReason.LEASE_LOST),
        )

    @functools.cached_property
    def ledger(self) -> EffectLedger:
        """The run's checkpoints and effect records."""
        from app.executor.effects import EffectLedger

        ledger = EffectLedger(
            self.deps.stores.progress,
            self.claimed.lease,
            sink=self.sink,
            max_bytes=self.deps.max_checkpoint_bytes,
            on_lost=functools.partial(self._stop, StopReason.LEASE_LOST),
            on_parked=functools.partial(self._stop, StopReason.RECONCILIATION_REQUIRED),
        )
        ledger.trace_parent = self._trace_parent
        return ledger

    @functools.cached_property
    def waits(self) -> Waits:
        """The run's durable sleeps, signals and questions."""
        from app.executor.waits import Waits

        return Waits(
            self.deps.stores.waits,
            self.claimed.lease,
            ledger=self.ledger,
            sink=self.sink,
            max_wait_s=self.deps.max_wait_s,
            max_question_bytes=self.deps.max_event_bytes,
            on_stop=self._interrupt,
        )

    @functools.cached_property
    def rates(self) -> RateLimiter:
        """The run's waits for rate-limit tokens, in the worker's shared buckets."""
        from app.executor.rates import RateLimiter

        return RateLimiter(
            self.deps.stores.rate_limits,
            emit=self.sink.add,
            max_wait_ms=self.deps.rate_limit_max_wait_ms,
        )

    @functools.cached_property
    def steps(self) -> StepBudget:
        """The run's ``max_steps`` budget."""
        from app.supervision.steps import StepBudget

        supervision = self.deps.supervision
        return StepBudget(
            self.claimed.budget.get("max_steps"),
            watchdog=supervision.watchdog,
            ratio=supervision.step_extension_ratio,
            emit=self.sink.add,
        )

    @functools.cached_property
    def family(self) -> Family:
        """The run's children: ``ctx.spawn`` (raises SpawnRefused where spawning is off)."""
        if self.deps.family is None:
            raise SpawnRefused("this worker cannot spawn runs (it was given no family)")
        from app.executor.children import Family

        return Family(
            self.deps.family(),
            self.claimed.lease,
            ledger=self.ledger,
            sink=self.sink,
            on_stop=self._interrupt,
        )

    @functools.cached_property
    def lease_tokens(self) -> LeaseTokens:
        """The run's lease tokens (``ctx.lease_token``)."""
        if self.deps.signing is None:
            raise ConfigurationError("this worker signs no lease tokens (it was given no keys)")
        from app.executor.lease_tokens import LeaseTokens

        return LeaseTokens(
            self.deps.signing(),
            self.claimed.lease,
            client=self.deps.lease_store.client,
            prefix=self.deps.lease_store.prefix,
            namespace=self.deps.namespace,
            max_lifetime_ms=self.deps.lease_token_max_ms,
        )

    @property
    def emitted(self) -> bool:
        """Whether the run built its event sink (it emitted): only then is there a flush."""
        return "sink" in self.__dict__

    @property
    def spawned(self) -> bool:
        """Whether the run built its family (it spawned or joined): only then is there a
        cascade to settle."""
        return "family" in self.__dict__

    async def check_steps_taken(self) -> None:
        """After the handler returned: raise :class:`~app.errors.VersionDrift` (the run
        parked) when the run recorded steps this attempt never asked for (the code it
        met ends earlier). An attempt that took no step reads nothing: not checked."""
        ledger: EffectLedger | None = self.__dict__.get("ledger")
        if ledger is not None:
            await ledger.check_end()

    async def settle_family(self) -> None:
        """After the run's terminal write: deliver its cascade at once, if it spawned."""
        family: Family | None = self.__dict__.get("family")
        if family is not None:
            await family.deliver_end()

    async def flush_events(self) -> None:
        """Wait until the run's queued events are written; nothing to do if it emitted none."""
        sink: EventSink | None = self.__dict__.get("sink")
        if sink is not None:
            await sink.flush()


class RunContext:
    """The handler's view of its run."""

    def __init__(
        self,
        claimed: ClaimedRun,
        *,
        helpers: RunHelpers,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """The context of one claimed run, writing through its helpers.

        Built by the worker from what the claim returned (identity, input, saved
        state, budgets), the run's helpers (events, checkpoints and effects, waits,
        rate limits, steps: each built on first use) and the loop sync handlers
        hand their writes to.
        """
        lease = claimed.lease
        self.run_id = lease.run_id
        self.queue = lease.queue
        self.fence = lease.fence
        self.owner_id = lease.owner_id
        self.handler = claimed.handler
        self.attempt = claimed.attempt
        self.max_attempts = claimed.max_attempts
        self.input = claimed.input
        self.state = claimed.state
        self.resume_input = claimed.resume_input
        self._helpers = helpers
        self._loop = loop
        # set once, by the loop; a sync handler's thread only reads it (one attribute
        # read is atomic): no threading.Event per run, which was ~3 % of a worker's CPU
        self._cancel_reason: StopReason | None = None
        self._supervision = helpers.deps.supervision
        self.nudges: list[str] = []

    @property
    def cancelled(self) -> bool:
        """True once the run must stop: a client cancelled it, or its lease is gone.

        Sync handlers (which cannot be interrupted) should check this between steps.
        """
        return self._cancel_reason is not None

    @property
    def cancel_reason(self) -> StopReason | None:
        """Why the run is stopping: ``cancel_requested``, ``lease_lost``, ``drain``..."""
        return self._cancel_reason

    def _signal_cancel(self, reason: StopReason) -> None:
        if self._cancel_reason is None:
            self._cancel_reason = reason

    async def emit(self, event_type: str, data: Any = None) -> None:
        """Append an event to the run's stream (batched; order is kept).

        Raises :class:`~app.errors.InvalidEvent` for reserved types such as
        ``succeeded`` and :class:`~app.errors.EventTooLarge` over the size bound.
        """
        await self._helpers.sink.add(event_type, data)

    async def progress(self, **data: Any) -> None:
        """Emit a ``progress`` event: evidence that the run is alive and moving."""
        await self._helpers.sink.add("progress", data)

    def emit_sync(self, event_type: str, data: Any = None) -> None:
        """``emit`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(self.emit(event_type, data), self._loop)
        future.result()

    async def checkpoint(self, state: Any) -> None:
        """Save JSON ``state`` (fenced, with a ``checkpoint`` event); ``ctx.state`` becomes it.

        A later attempt of the run starts with it in ``ctx.state``. Raises
        :class:`~app.errors.CheckpointTooLarge` over LEASEHOLD_MAX_CHECKPOINT_BYTES,
        :class:`~app.errors.InvalidCheckpoint` for non-JSON state, and
        :class:`~app.errors.LeaseLost` when another owner holds the run now.
        """
        self.state = await self._helpers.ledger.checkpoint(state)

    def checkpoint_sync(self, state: Any) -> None:
        """``checkpoint`` for sync handlers running in the worker's thread pool."""
        asyncio.run_coroutine_threadsafe(self.checkpoint(state), self._loop).result()

    async def effect(self, name: str, fn: EffectFn, *, idempotent: bool = False) -> Any:
        """Run side effect ``fn(key)`` at most once per call of this run; return its result.

        ``fn`` (sync or async) gets an idempotency key stable across attempts; pass it
        to the downstream system. A result recorded by an earlier attempt is returned
        without calling ``fn``. If an earlier attempt started it and its outcome is
        unknown, ``idempotent=True`` calls it again with the same key; otherwise the
        run is parked in ``reconciliation_required`` and
        :class:`~app.errors.EffectOutcomeUnknown` is raised.
        """
        return await self._helpers.ledger.effect(name, fn, idempotent=idempotent)

    def effect_sync(self, name: str, fn: EffectFn, *, idempotent: bool = False) -> Any:
        """``effect`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(
            self.effect(name, fn, idempotent=idempotent), self._loop
        )
        return future.result()

    async def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new code at change ``patch_id`` (a deploy's guard).

        True on a run that reaches this point first on code with the patch; False on a
        run that already went past it on the code before (its recorded steps go on
        beyond this point). Decided once per run and recorded (a ``patch`` event), so
        every replay takes the same branch. It takes no step position: wrapping a change
        in it never shifts a run's steps. Keep both branches until no run that can take
        the old one remains (``GET /runs?status=...``), then drop the old branch
        (:meth:`deprecate_patch` marks that phase), then the call.
        """
        return await self._helpers.ledger.patched(patch_id)

    def patched_sync(self, patch_id: str) -> bool:
        """``patched`` for sync handlers running in the worker's thread pool."""
        return asyncio.run_coroutine_threadsafe(self.patched(patch_id), self._loop).result()

    def deprecate_patch(self, patch_id: str) -> None:
        """The cleanup phase of change ``patch_id`` (the old branch is gone): records and
        reads nothing, since a patch takes no step position; it marks where the
        ``patched`` call was. Raises :class:`~app.errors.InvalidEffect` for a bad id."""
        self._helpers.ledger.check_patch_id(patch_id)

    async def sleep(self, seconds: float, *, name: str = "sleep") -> None:
        """Park the run for ``seconds`` without holding a worker, then go on.

        The lease and the worker's slot are given back at once (a ``wait`` event says
        until when); the run wakes when the time comes and **the handler is called
        again from the top**, its earlier waits and effects replaying their recorded
        outcomes and this sleep returning. Checkpoint before a sleep what must not be
        done again. Sleeps are numbered per ``name`` like effects. Raises
        :class:`~app.errors.InvalidWait` for a negative, non-finite or too long sleep.
        """
        await self._helpers.waits.sleep(seconds, name=name)

    async def sleep_until(self, when: datetime | float, *, name: str = "sleep") -> None:
        """``sleep`` until ``when``: an aware datetime, or epoch seconds."""
        await self._helpers.waits.sleep_until(when, name=name)

    async def wait_for_signal(self, name: str, *, timeout_s: float | None = None) -> Any:
        """Park the run until ``POST /runs/{id}/signals/{name}`` comes; return its JSON payload.

        A signal sent earlier (while the run was queued or running) waits in the run's
        inbox and is taken at once. Past ``timeout_s`` raises
        :class:`~app.errors.SignalTimeout` (non-retryable unless caught). Parks and
        replays like :meth:`sleep`.
        """
        return await self._helpers.waits.signal(name, timeout_s=timeout_s)

    async def ask_human(self, question: Any, *, name: str = "ask") -> Any:
        """Park the run in ``waiting_human``, ``question`` (JSON) in its event; return the answer.

        ``POST /runs/{id}/resume`` with ``{"input": ...}`` answers it: the handler runs
        again and this call returns that input. Parks and replays like :meth:`sleep`.
        """
        return await self._helpers.waits.ask(question, name=name)

    def sleep_sync(self, seconds: float, *, name: str = "sleep") -> None:
        """``sleep`` for sync handlers: parks the run and unwinds the thread's call."""
        asyncio.run_coroutine_threadsafe(self.sleep(seconds, name=name), self._loop).result()

    def wait_for_signal_sync(self, name: str, *, timeout_s: float | None = None) -> Any:
        """``wait_for_signal`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(
            self.wait_for_signal(name, timeout_s=timeout_s), self._loop
        )
        return future.result()

    def ask_human_sync(self, question: Any, *, name: str = "ask") -> Any:
        """``ask_human`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(self.ask_human(question, name=name), self._loop)
        return future.result()

    async def spawn(
        self, handler: str, input: Any = None, **options: Unpack[SpawnOptions]
    ) -> Child:
        """Start child run ``handler(input)``; return its handle (:class:`Child`).

        ``options``: ``queue`` (else this run's), ``on_parent_end``, ``concurrency_key``,
        ``max_attempts``, ``on_lease_expired``, ``metadata`` (:class:`SpawnOptions`).
        Exactly once per spawn step, across retries and takeovers: a replay of this
        call returns the same child (numbered ``spawn:<n>``, saved with checkpoints
        like effects). The child inherits this run's concurrency key (unless given),
        its trace, ``root_id`` and ``depth + 1``. When this run ends other than by a
        cancel, a child still live is cancelled (``on_parent_end="cancel"``) or left
        to finish (``"detach"``); cancelling this run cancels every live child.
        Raises :class:`~app.errors.SpawnRefused` (nothing created) for an unknown
        handler or refused input, an undeclared queue, or past
        LEASEHOLD_MAX_CHILDREN_PER_RUN / LEASEHOLD_MAX_RUN_DEPTH.
        """
        return await self._helpers.family.spawn(handler, input, **options)

    async def join(
        self, children: Sequence[Child | str], *, mode: str = "all", timeout_s: float | None = None
    ) -> Any:
        """Wait for ``children`` without holding a worker; return their results.

        ``mode="all"``: their outputs, in order; raises :class:`~app.errors.ChildFailed`
        (the child's id, status and error attached) as soon as one failed, was
        cancelled, orphaned or expired. ``"any"``: the first success's output
        (``ChildFailed`` when none succeeded). ``"settled"``: a
        :class:`~app.executor.children.ChildOutcome` per child. A durable wait: the run
        parks (no lease, no slot) until that holds, then **the handler is called again
        from the top**, its spawns replaying the same children and this join returning.
        Past ``timeout_s``: :class:`~app.errors.JoinTimeout`. Joining no child, a child
        twice or a run that is not this run's child: :class:`~app.errors.InvalidWait`.
        """
        return await self._helpers.family.join(children, mode=mode, timeout_s=timeout_s)

    def join_sync(
        self, children: Sequence[Child | str], *, mode: str = "all", timeout_s: float | None = None
    ) -> Any:
        """``join`` for sync handlers: parks the run and unwinds the thread's call."""
        future = asyncio.run_coroutine_threadsafe(
            self.join(children, mode=mode, timeout_s=timeout_s), self._loop
        )
        return future.result()

    def spawn_sync(self, handler: str, input: Any = None, **options: Unpack[SpawnOptions]) -> Child:
        """``spawn`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(self.spawn(handler, input, **options), self._loop)
        return future.result()

    def operation(
        self,
        kind: str,
        subject: str = "",
        *,
        lease_s: float | None = None,
        first_progress_s: float | None = None,
        idle_s: float | None = None,
        max_duration_s: float | None = None,
        rate_limit: str | None = None,
        rate_cost: int = 1,
    ) -> Operation:
        """Supervise a block of work (``async with ctx.operation(...) as op``).

        Report liveness with ``op.progress()``; start in-flight helpers with
        ``op.create_task()`` so they are cancelled and awaited with the operation.
        When the lease (``lease_s``, else LEASEHOLD_OP_LEASE_S__<KIND>) runs out, a
        ``wait`` event goes out and the watchdog decides; nothing is cancelled unless
        it says INTERVENE or ESCALATE, or a budget runs out (each budget raises its
        own typed, non-retryable error). ``rate_limit`` takes ``rate_cost`` tokens of
        that key first (as :meth:`rate_limit`): the operation's lease and budgets
        start once they are granted, so the wait counts against none of them.
        """
        limits = self._supervision.limits(
            kind,
            lease_s=lease_s,
            first_progress_s=first_progress_s,
            idle_s=idle_s,
            max_duration_s=max_duration_s,
        )
        from app.supervision.operation import Operation

        before = None
        if rate_limit is not None:
            before = functools.partial(self._acquire, rate_limit, rate_cost)
        return Operation(
            kind=kind,
            subject=subject,
            limits=limits,
            watchdog=self._supervision.watchdog,
            emit=self.emit,
            nudges=self.nudges,
            before=before,
        )

    async def supervise(
        self,
        kind: str,
        subject: str,
        work: Any,
        *,
        lease_s: float | None = None,
        first_progress_s: float | None = None,
        idle_s: float | None = None,
        max_duration_s: float | None = None,
    ) -> Any:
        """Run ``work`` once, in its own task, as a supervised operation; return its result.

        ``work`` is an awaitable, or a function taking the :class:`Operation` (async,
        or sync to run in a thread) so it can report ``op.progress()``.
        """
        operation = self.operation(
            kind,
            subject,
            lease_s=lease_s,
            first_progress_s=first_progress_s,
            idle_s=idle_s,
            max_duration_s=max_duration_s,
        )
        from app.supervision.operation import run_supervised

        return await run_supervised(operation, work)

    @contextlib.asynccontextmanager
    async def rate_limit(self, key: str, cost: int = 1) -> AsyncIterator[Grant]:
        """Wait for ``cost`` tokens of a declared rate-limit key, then run the block.

        ``async with ctx.rate_limit("openai") as grant: await client.chat(...)``; the
        :class:`~app.executor.rates.Grant` says when the tokens were due and how long
        it waited. Every worker
        and queue shares the key's bucket (GCRA in Redis): over any window of one
        period at most limit + burst pass. While it waits the lease keeps renewing
        and the run's stream has a ``wait`` event (``kind: rate_limited``, ``key``,
        ``until_ms``). A token further away than LEASEHOLD_RATE_LIMIT_MAX_WAIT_S
        releases the run until then instead (:class:`~app.errors.RateLimitRelease`:
        let it propagate; no attempt is spent). Inside ``ctx.operation`` use its
        ``rate_limit=`` argument, so the wait is not counted against its budgets.
        Raises :class:`~app.errors.RateLimitNotDeclared` for an undeclared key and
        :class:`~app.errors.InvalidRateLimitUse` for a cost above the key's burst.
        """
        yield await self._acquire(key, cost)

    def rate_limit_sync(self, key: str, cost: int = 1) -> Grant:
        """``rate_limit`` for sync handlers: blocks their thread until the tokens are due."""
        future = asyncio.run_coroutine_threadsafe(self._acquire(key, cost), self._loop)
        return future.result()

    async def rate_limited(self, key: str, *, retry_after_s: float, release: bool = True) -> int:
        """An upstream answered 429: slow every worker using ``key`` for ``retry_after_s``.

        Nobody takes a token of the key before then; afterwards it refills one token
        at a time. With ``release`` (the default) raises
        :class:`~app.errors.RateLimitRelease`: let it propagate, and the run goes back
        to the queue until then without spending an attempt (a ``wait`` event says
        so). ``release=False`` returns the epoch ms (Redis clock) a token passes again.
        """
        return await self._helpers.rates.report_429(
            key, retry_after_s=retry_after_s, release=release
        )

    def take_nudges(self) -> list[str]:
        """Notes the watchdog left (NUDGE) since the last call, oldest first."""
        notes, self.nudges[:] = list(self.nudges), []
        return notes

    async def step(self) -> int:
        """Count one step of the run against its ``max_steps`` budget; returns the count.

        Past the budget the watchdog is asked for a proportional extension (at most
        a few per run); without one the run fails with ``BudgetExhausted``.
        """
        return await self._helpers.steps.advance()

    async def lease_token(self, *, audience: str) -> str:
        """A signed token proving this run's lease, for a call to ``audience`` (a tool).

        A JWT (EdDSA; keys at ``GET /.well-known/jwks.json``) whose claims are the run id
        (``sub``), ``queue``, ``owner``, ``fence`` and ``aud``; ``exp`` is the lease's
        expiry now (Redis clock). Send it as ``Authorization: Bearer <token>`` through
        ``leasehold gate`` or check it with :mod:`app.tokens.verify`: once another worker
        takes the run over, the gate refuses it. A renewal does not extend a token
        already issued: call this per outside call, or keep the token until near its
        ``exp``. One Redis round trip. Raises :class:`~app.errors.LeaseLost` when this
        worker no longer holds the run.
        """
        return await self._helpers.lease_tokens.issue(audience)

    def lease_token_sync(self, *, audience: str) -> str:
        """``lease_token`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(self.lease_token(audience=audience), self._loop)
        return future.result()

    async def _acquire(self, key: str, cost: int) -> Grant:
        # on the loop: the rate limiter is built there, on first use
        return await self._helpers.rates.acquire(key, cost)
