"""The worker process: claims runs, executes them under leases, drains on SIGTERM.

Wiring, per process:

* one :class:`Courier` per queue (claims and terminal writes, batched), woken by
  the :class:`ChannelListener` when a script announces runnable work;
* one :class:`RunExecution` task per run, limited by :class:`Slots`;
* the :class:`Heartbeat` thread renewing every lease at TTL/3 on its own
  connection, and advertising the worker in the registry;
* the :class:`~app.reconciler.reconciler.Reconciler`, unless disabled.

**Drain** (SIGTERM or SIGINT, or ``POST /workers/{id}/drain``, seen by the
heartbeat's advertisement): stop claiming, let running runs finish for
``drain_timeout_s``, then interrupt the rest and release them to the queue
(fence+1, event ``released``) so another worker takes them at once
(:mod:`app.executor.drain`). A second signal cuts the drain short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from app.builds import handler_modules_build
from app.errors import UnknownHandler
from app.executor.courier import Courier
from app.executor.drain import drain, install_signal_handlers
from app.executor.early_cancels import EarlyCancels
from app.executor.execution import ExecutionDeps, RetryPolicy, RunExecution
from app.executor.heartbeat import Heartbeat, HeartbeatCallbacks
from app.executor.helper_deps import helper_deps
from app.executor.inbox import HandoffInbox
from app.executor.listener import ChannelListener
from app.executor.reasons import StopReason
from app.executor.slots import Slots
from app.executor.table import LeaseTable
from app.handlers import HandlerRegistry, HandlerSpec
from app.models import WorkerInfo
from app.retry import REDIS_BACKOFF, retrying
from app.settings import Settings
from app.startup import settle
from app.store.context import StoreContext
from app.store.keys import QueueKeys
from app.store.leases import workers
from app.store.leases.store import ClaimedRun, LeaseRenewer, LeaseStore
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.queues.store import QueueStore
from app.store.redis.connection import AsyncRedis, SyncRedis, async_client, sync_client
from app.store.redis.refusals import describe, is_transient
from app.telemetry.metrics import LEASES_LOST, LOOP_LAG

if TYPE_CHECKING:
    # the reconciler and its schedule pass (schedules, cron) and the run store are imported
    # once the first claim is answered (Worker._rest_of_start); the children's modules
    # (family, child store, outbox) on a run's first spawn (helper_deps.family_deps); the
    # metrics server's only when it is on
    from app.reconciler.reconciler import Reconciler
    from app.store.runs.store import RunStore
    from app.telemetry.metrics_server import MetricsServer

log = logging.getLogger(__name__)

# the couriers' first claim waits this long at most for the cancel channel's subscription
SUBSCRIBE_WAIT_S = 5.0
# a hand-off registration's life: how long a paused or dead worker may still be handed a run
HANDOFF_REGISTRATION_S = 2.0
ADVERTISEMENT_TTL_BEATS = 3
# the reconciler waits for the first claim's answer to be used (a short claim came back, or
# a run settled), this long at most (a long first run, a claim refused): until then its
# imports would stand between a worker's start and its first claim and first run
RECONCILER_START_WAIT_S = 1.0


def new_worker_id() -> str:
    """An owner id that names its host and pid, plus randomness for restarts."""
    host = socket.gethostname().split(".")[0][:32] or "host"
    return f"w-{host}-{os.getpid()}-{secrets.token_hex(2)}"


@dataclass
class _Machinery:
    """What a serving worker runs besides its runs; :meth:`Worker._tear_down` stops it."""

    client: AsyncRedis
    # the heartbeat's own blocking connection, and the thread that renews on it
    heartbeat_client: SyncRedis
    heartbeat: Heartbeat
    # the handlers' threads (a sync handler runs in one)
    pool: ThreadPoolExecutor
    # the listener, the hand-off inboxes and the reconciler: cancelled first at the end
    background: list[asyncio.Task[None]]
    metrics_server: MetricsServer | None = None


class Worker:
    """One executor process serving one or more queues."""

    def __init__(
        self,
        settings: Settings,
        registry: HandlerRegistry,
        *,
        worker_id: str | None = None,
        scripts: Scripts | None = None,
    ) -> None:
        self.settings = settings
        self._scripts = scripts  # None: Scripts.for_settings; app.testing's read a test clock
        self.registry = registry
        self.id = worker_id or new_worker_id()
        # the code this worker runs: recorded on every run it claims
        self.build_id = settings.build_id or handler_modules_build(
            spec.fn.__module__ for spec in registry
        )
        self.started_at = datetime.now(tz=UTC)
        self._stop = asyncio.Event()
        self._signals = 0
        self._executions: dict[str, RunExecution] = {}
        self._couriers: dict[str, Courier] = {}
        self._table = LeaseTable()
        self._slots = Slots(settings.concurrency, prefetch_max=settings.prefetch_max)
        # cancel pushes read before the claim reply that registers their run
        self._early_cancels = EarlyCancels()
        self._loop_lag_ms = 0.0
        self._first_answer_used = asyncio.Event()

    def request_stop(self) -> None:
        """Begin draining; a second request skips the rest of the drain."""
        self._signals += 1
        self._stop.set()
        if self._signals > 1:
            for execution in list(self._executions.values()):
                execution.stop(StopReason.DRAIN)

    async def run(self) -> None:
        """Serve until asked to stop, then drain and exit cleanly.

        The composition root: one Redis connection and the stores on one context,
        the heartbeat on a connection of its own, the handlers' thread pool; then
        the couriers, the listener and the reconciler serve until a stop, and
        everything is torn down in the reverse order.
        """
        settings = self.settings
        url = settings.resolved_redis_url()
        client = async_client(url)
        scripts = self._scripts or Scripts.for_settings(settings)
        listener = self._listener(client)
        # subscribed while the scripts load (the two take about as long): no run is
        # claimed before, so none can miss its cancel push
        listening = asyncio.create_task(listener.run_forever(), name="listener")
        await _connect_listening(
            client, scripts, QueueStore.for_settings(client, scripts, settings), listening=listening
        )
        stores = StoreContext.for_settings(client, scripts, settings)
        lease_store = LeaseStore(stores)
        lease_store.build_id = self.build_id
        machinery = self._machinery(
            url, client, lease_store=lease_store, stores=stores, listening=listening
        )
        try:
            await self._serve(machinery, listener, lease_store, stores)
        finally:
            await self._tear_down(machinery)

    def _machinery(
        self,
        url: str,
        client: AsyncRedis,
        *,
        lease_store: LeaseStore,
        stores: StoreContext,
        listening: asyncio.Task[None],
    ) -> _Machinery:
        """The heartbeat (on a connection of its own), the handlers' thread pool and what
        every run's execution shares: built, nothing started yet."""
        settings = self.settings
        heartbeat_client = self._heartbeat_client(url)
        heartbeat = self._heartbeat(
            LeaseRenewer(
                heartbeat_client,
                scripts=stores.scripts,
                prefix=settings.data_prefix,
                lease_ttl_ms=settings.lease_ttl_ms,
            )
        )
        pool = ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="leasehold-handler"
        )
        self._deps = self._execution_deps(lease_store, stores, pool)
        return _Machinery(client, heartbeat_client, heartbeat, pool, background=[listening])

    async def _serve(
        self,
        machinery: _Machinery,
        listener: ChannelListener,
        lease_store: LeaseStore,
        stores: StoreContext,
    ) -> None:
        """Start the heartbeat, the couriers (once subscribed), the hand-off inboxes and
        the reconciler; serve until a stop is requested, then drain.

        What it starts it records in ``machinery``, so a failure part-way is torn down.
        """
        settings = self.settings
        if settings.worker_metrics_port:
            # imported only when on: its HTTP server modules are start-up time otherwise
            from app.telemetry.metrics_server import start_metrics_server

            # a daemon thread; it serves the same registry the heartbeat updates
            machinery.metrics_server = start_metrics_server(settings)
        machinery.heartbeat.start()
        install_signal_handlers(self.request_stop)
        await _subscribed(listener)
        self._start_couriers(lease_store)
        if settings.handoff:
            machinery.background += [
                asyncio.create_task(self._inbox(machinery.client, lease_store, queue).run_forever())
                for queue in settings.queues
            ]
        machinery.background.append(
            asyncio.create_task(self._rest_of_start(lease_store, stores), name="reconciler")
        )
        log.info(
            "worker %s serving queues %s with concurrency %d, build %s",
            self.id,
            ",".join(settings.queues),
            settings.concurrency,
            self.build_id,
        )
        await self._stop.wait()
        await drain(self._executions, self._couriers.values(), timeout_s=settings.drain_timeout_s)

    async def _tear_down(self, machinery: _Machinery) -> None:
        """Stop what :meth:`_serve` started, withdraw the advertisement, close the connections.

        Also runs when the start failed part-way: ``machinery`` holds only the background
        tasks that were created, and a metrics server only once it serves.
        """
        for task in machinery.background:
            task.cancel()
        await asyncio.gather(*machinery.background, return_exceptions=True)
        for courier in self._couriers.values():
            await courier.close()
        machinery.heartbeat.stop()
        if machinery.metrics_server is not None:
            machinery.metrics_server.shutdown()
            machinery.metrics_server.server_close()
        machinery.heartbeat.join(timeout=self.settings.renew_interval_s + 5)
        await self._withdraw(machinery.client)
        machinery.pool.shutdown(wait=False, cancel_futures=True)
        machinery.heartbeat_client.close()
        await machinery.client.aclose()
        log.info("worker %s stopped", self.id)

    async def _rest_of_start(self, lease_store: LeaseStore, stores: StoreContext) -> None:
        """Once the first claim's answer is used: freeze what start-up made, then serve the
        reconciler (if on) until cancelled.

        Waits for a short claim or a settled run (RECONCILER_START_WAIT_S at most): the
        reconciler's imports (its schedule pass, schedules, cron) are ~20 ms of a start
        that a worker's first claim and first run need not wait for (issue 19 aim 2).
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RECONCILER_START_WAIT_S):
                await self._first_answer_used.wait()
        reconciler = None
        if self.settings.reconciler_enabled:
            from app.store.runs.store import RunStore

            reconciler = self._reconciler(lease_store, RunStore(stores))
        # start-up objects (modules, handler models, settings) live as long as the
        # process: freeze them, so each GC pass scans only short-lived run objects
        settle()
        if reconciler is not None:
            await reconciler.run_forever()

    def _heartbeat_client(self, url: str) -> SyncRedis:
        """The heartbeat's own blocking connection, every call bounded by the safety margin.

        No single call of the heartbeat may outlast the margin: not a read, not a
        connect (a partition that drops SYNs), not a retry.
        """
        bound_s = max(0.05, self.settings.effective_safety_margin_s)
        return sync_client(url, socket_timeout_s=bound_s, connect_timeout_s=bound_s, retries=0)

    def _execution_deps(
        self, lease_store: LeaseStore, stores: StoreContext, pool: ThreadPoolExecutor
    ) -> ExecutionDeps:
        """What every run's execution shares: its helpers' stores and bounds
        (:mod:`app.executor.helper_deps`), the couriers, the pool, the limits."""
        settings = self.settings
        return ExecutionDeps(
            helpers=helper_deps(
                settings, lease_store=lease_store, stores=stores, registry=self.registry
            ),
            courier_for=self._couriers.__getitem__,
            thread_pool=pool,
            retry=RetryPolicy(settings.retry_backoff_s, settings.retry_backoff_max_s),
            on_slot_freed=self._slot_freed,
            on_settled=self._settled,
            run_gate=self._slots.run_gate,
        )

    def _listener(self, client: AsyncRedis) -> ChannelListener:
        """The wake/cancel listener; a wake before the couriers exist wakes nobody (they
        claim when they start)."""
        prefix = self.settings.data_prefix
        return ChannelListener(
            client,
            queue_keys=[QueueKeys(prefix, queue) for queue in self.settings.queues],
            on_ready=self._wake_courier,
            on_cancel=self._cancel_pushed,
        )

    def _wake_courier(self, queue: str) -> None:
        courier = self._couriers.get(queue)
        if courier is not None:
            courier.notify_ready()

    def _handoff_ms(self) -> int:
        """How long a hand-off registration lives: HANDOFF_REGISTRATION_S (or two idle
        wake intervals, when shorter). The idle courier renews it at half that, so a
        worker paused or dead stops taking hand-offs soon after (at most one run is
        handed to it, and that run's lease expires as any)."""
        if not self.settings.handoff:
            return 0
        # never above a third of the lease: a worker killed while registered is found
        # dead by its lease's expiry, and a run created after that goes to the living
        life_s = min(HANDOFF_REGISTRATION_S, self.settings.lease_ttl_s / 3)
        return max(1, round(1000 * min(life_s, 2 * self.settings.idle_wake_s)))

    def _inbox(self, client: AsyncRedis, lease_store: LeaseStore, queue: str) -> HandoffInbox:
        """The hand-off inbox of one queue: its rows go to the courier, as claimed runs."""
        courier = self._couriers[queue]

        def on_row(raw: str, read_at: float) -> None:
            courier.take_handoff(lease_store.handed_off(queue, self.id, raw), read_at)

        async def confirm(raw: str) -> bool:
            lease = lease_store.handed_off(queue, self.id, raw).lease
            if await lease_store.confirm(lease) != LeaseAnswer.LOST:
                return True
            log.warning(
                "a hand-off read late lost its lease meanwhile: not started",
                extra={"run_id": lease.run_id, "fence": lease.fence},
            )
            return False

        return HandoffInbox(
            client,
            keys=lease_store.keys(queue),
            owner_id=self.id,
            timeout_s=self._handoff_ms() / 2000,
            on_row=on_row,
            on_idle=courier.handoff_idle,
            # a heartbeat's period: a row younger has two thirds of its lease left at least
            stale_after_s=self.settings.lease_ttl_s / 3,
            confirm=confirm,
        )

    def _heartbeat(self, renewer: LeaseRenewer) -> Heartbeat:
        loop = asyncio.get_running_loop()
        callbacks = HeartbeatCallbacks(
            lease_lost=self._lease_lost,
            cancel_requested=self._cancel_requested,
            beat_done=self._beat_done,
        )
        ttl_ms = self.settings.lease_ttl_ms * ADVERTISEMENT_TTL_BEATS
        renewer_client = renewer.client

        def advertise(loop_lag_ms: float) -> None:
            pipe = renewer_client.pipeline(transaction=False)
            workers.advertise(pipe, self.settings.data_prefix, self.describe(loop_lag_ms), ttl_ms)
            if workers.drain_requested(pipe.execute()) and not self._stop.is_set():
                # the heartbeat's thread: the drain starts on the event loop
                loop.call_soon_threadsafe(self._drain_requested)

        jeopardy_after_s = self.settings.lease_ttl_s - self.settings.effective_safety_margin_s
        return Heartbeat(
            table=self._table,
            renewer=renewer,
            loop=loop,
            callbacks=callbacks,
            interval_s=self.settings.renew_interval_s,
            jeopardy_after_s=jeopardy_after_s,
            advertise=advertise,
        )

    def _drain_requested(self) -> None:
        if not self._stop.is_set():
            log.info("drain requested (POST /workers/%s/drain)", self.id)
            self.request_stop()

    def describe(self, loop_lag_ms: float) -> WorkerInfo:
        """This worker's advertisement for GET /workers."""
        return WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(self.settings.queues),
            concurrency=self.settings.concurrency,
            running=len(self._executions),
            loop_lag_ms=round(loop_lag_ms, 3),
            started_at=self.started_at,
            last_heartbeat_at=datetime.now(tz=UTC),
            draining=self._stop.is_set(),
            lease_ttl_ms=self.settings.lease_ttl_ms,
            build_id=self.build_id,
        )

    def _reconciler(self, lease_store: LeaseStore, run_store: RunStore) -> Reconciler:
        from app.reconciler.reconciler import Reconciler
        from app.reconciler.schedule_pass import SchedulePass

        return Reconciler(
            lease_store=lease_store,
            run_store=run_store,
            queues=list(self.settings.queues),
            interval_s=self.settings.effective_reconcile_interval_s,
            schedules=SchedulePass.for_settings(run_store, self.settings),
            schedule_tick_s=self.settings.schedule_tick_s,
            outbox_sweep_s=self.settings.outbox_sweep_s,
        )

    def _start_couriers(self, lease_store: LeaseStore) -> None:
        for queue in self.settings.queues:
            courier = Courier(
                queue=queue,
                store=lease_store,
                owner_id=self.id,
                slots=self._slots,
                start_run=self._start_run,
                batch_max=self.settings.claim_batch_max,
                idle_wake_s=self.settings.idle_wake_s,
                slots_returned=self._claim_came_back_short,
                trips_in_flight=self.settings.round_trips_in_flight,
                handoff_ms=self._handoff_ms(),
            )
            self._couriers[queue] = courier
            courier.start()

    def _start_run(self, claimed: ClaimedRun, confirmed_at: float) -> None:
        if claimed.id in self._executions:
            self._stop_stale(claimed)
        self._table.add(claimed.lease, confirmed_at)
        self._deps.tally.claimed(claimed.queue, claimed.handler)
        try:
            spec: HandlerSpec | None = self.registry.get(claimed.handler)
        except UnknownHandler:  # the run then fails as unknown_handler
            spec = None
        execution = RunExecution(claimed, spec, self._deps)
        self._executions[claimed.id] = execution
        if self._early_cancels.take(claimed.id, claimed.fence):
            # its cancel was pushed before this claim's reply was read: it never starts
            execution.stop(StopReason.CANCEL_REQUESTED)
        execution.start()

    def _slot_freed(self, held_s: float | None) -> None:
        if held_s is not None:
            self._slots.ran(held_s)
        self._slots.give_back(1)
        self._kick_couriers()

    def _claim_came_back_short(self) -> None:
        self._kick_couriers()
        if not self._first_answer_used.is_set():
            # once the claim's runs have started (right after this call): with none, the
            # reconciler may start now; else it waits for the first to settle
            asyncio.get_running_loop().call_soon(self._answer_used_if_idle)

    def _answer_used_if_idle(self) -> None:
        if not self._executions:
            self._first_answer_used.set()

    def _kick_couriers(self) -> None:
        for courier in self._couriers.values():
            courier.kick()

    def _stop_stale(self, claimed: ClaimedRun) -> None:
        """Redis handed out a run this worker still executes: its earlier claim was lost.

        That happens when a failover loses the claim (asynchronous replication):
        the run is queued again on the new primary, and this worker may claim it
        before its heartbeat hears LOST, even with the same fence, so fencing
        cannot tell the two executions apart. The old one must stop and write
        nothing (README: what a failover can do to a run).
        """
        stale = self._executions.get(claimed.id)
        if stale is not None:  # the caller checked; a stale one is rare
            log.warning(
                "claimed a run this worker still executes (its earlier claim was lost in a "
                "failover): stopping the earlier execution without writing",
                extra={"run_id": claimed.id, "fence": claimed.fence},
            )
            stale.stop(StopReason.LEASE_LOST)

    def _settled(self, run_id: str) -> None:
        current = self._executions.get(run_id)
        if current is not None and current.task is not asyncio.current_task():
            return  # a stale execution settling (see _stop_stale): the new one stays
        self._first_answer_used.set()
        self._table.remove(run_id)
        self._executions.pop(run_id, None)

    def _lease_lost(self, run_id: str, reason: StopReason) -> None:
        execution = self._executions.get(run_id)
        if execution is not None:
            LEASES_LOST.labels(reason).inc()
            log.warning("lease lost (%s): stopping the run", reason, extra={"run_id": run_id})
            execution.stop(reason)

    def _cancel_requested(self, run_id: str) -> None:
        execution = self._executions.get(run_id)
        if execution is not None:
            execution.stop(StopReason.CANCEL_REQUESTED)

    def _cancel_pushed(self, run_id: str, fence: int) -> None:
        execution = self._executions.get(run_id)
        if execution is not None and execution.claimed.fence == fence:
            execution.stop(StopReason.CANCEL_REQUESTED)
        else:  # maybe a claim whose reply is still on its way (early_cancels.py)
            self._early_cancels.keep(run_id, fence)

    def _beat_done(self, loop_lag_ms: float) -> None:
        self._loop_lag_ms = loop_lag_ms
        LOOP_LAG.set(loop_lag_ms / 1000)

    async def _withdraw(self, client: AsyncRedis) -> None:
        try:
            pipe = client.pipeline(transaction=False)
            workers.withdraw(pipe, self.settings.data_prefix, self.id)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("could not withdraw the worker advertisement: %s", exc)


async def _subscribed(listener: ChannelListener) -> None:
    """Until the listener's first subscription stands, or SUBSCRIBE_WAIT_S at most.

    Bounded: a Redis that refuses the subscription (an ACL without pub/sub) still
    gets its runs claimed, as before, with their cancels carried by the renewals.
    """
    try:
        async with asyncio.timeout(SUBSCRIBE_WAIT_S):
            await listener.subscribed.wait()
    except TimeoutError:
        log.warning(
            "claiming without a subscription after %.0fs: cancels reach runs at their renewal",
            SUBSCRIBE_WAIT_S,
        )


async def _connect_listening(
    client: AsyncRedis, scripts: Scripts, queues: QueueStore, *, listening: asyncio.Task[None]
) -> None:
    """:func:`_connect`, and if the start fails there, the listener (already subscribing,
    ``listening``) is cancelled before the error goes on: no task outlives the start."""
    try:
        await _connect(client, scripts, queues)
    except BaseException:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        raise


async def _connect(client: AsyncRedis, scripts: Scripts, queues: QueueStore) -> None:
    """Wait for Redis (it may be starting next to us), load the scripts, declare our queues.

    Waits as long as Redis is unreachable, loading or mid-failover (a fleet of
    workers started with it comes up at jittered times); raises what no wait
    cures (a refused script, missing permissions), so a broken start is seen.
    """

    async def connect() -> None:
        await scripts.load_all(client)
        await queues.announce_configured()

    try:
        await retrying(
            connect,
            transient=is_transient,
            what="connecting to redis",
            backoff=REDIS_BACKOFF,
            describe=describe,
            logger=log,
        )
    except (RedisError, OSError) as exc:
        log.error("cannot start: Redis refused the worker (%s): %s", describe(exc), exc)
        raise
