"""The reconciler: finds runs whose executor lease expired and applies the policy.

It runs inside every worker by default and as ``leasehold reconciler``. Every
interval (TTL/3 by default, with ±20% jitter so replicas spread out) it calls
``reconcile_expired`` on each queue; the script re-checks every lease against
the Redis clock and acts atomically, so any number of reconcilers may run:

* a cancel was requested → ``cancelled``;
* ``on_lease_expired = "retry"`` and attempts remain → ``queued`` again (fence+1,
  events ``lease_expired`` then ``requeued``);
* otherwise → ``orphaned``, error ``executor lease expired`` (code ``lease_expired``;
  the CLI and the console show ``orphaned: executor lease expired``) with the
  evidence (owner, fence, last renewal, expiry, detection time) in its details.

The same pass ends the runs nobody claimed within their queued time-to-live
(``LEASEHOLD_QUEUED_TTL_S``, or the run's ``queued_ttl_s``) as ``expired``, in
batches of ``RECONCILE_BATCH`` (``expire_queued``): a queue no worker serves
does not keep runs for ever. The reconciler also runs standalone, so this holds
for queues that have no worker at all. Each pass also sweeps one chunk of the
queue's listing index for entries of runs whose retention ended
(``RunStore.sweep_index``), so the index does not outgrow the runs.

An expired lease is never by itself an error: in the retry case the run simply
continues elsewhere. (DESIGN §6 names the first retry event ``orphaned``; it is
``lease_expired`` here so that ``orphaned`` is only ever the terminal event a
client can stop reading at.)

Detection time is at most TTL + one reconcile interval (+ jitter).

Beside it, on its own shorter interval (``LEASEHOLD_SCHEDULE_TICK_S``), every
reconciler runs the schedule pass (:mod:`app.reconciler.schedule_pass`): due fires become
runs, exactly one per fire time however many reconcilers run. And on
``LEASEHOLD_OUTBOX_SWEEP_S`` it sweeps each queue's outbox (:mod:`app.store.outbox.store`):
a child's end reaches its parent, a parent's end its children, even when whoever
ended the run died before delivering it; and a parked join's children are looked
for, so one deleted before it ended still reaches its parent (``child_record_gone``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from app.reconciler.schedule_pass import SchedulePass
from app.retry import REDIS_BACKOFF, REPEAT_LOG_EVERY_S, RepeatLog
from app.settings import Settings
from app.store.builds.store import BuildStore
from app.store.flow.store import FlowStore
from app.store.leases.store import RECONCILE_BATCH, LeaseStore, ReconcileAction
from app.store.leases.workers import list_workers
from app.store.lua.scripts import Scripts
from app.store.outbox.store import Outbox
from app.store.redis.connection import async_client
from app.store.redis.refusals import refusal_of
from app.store.runs.store import RunStore
from app.telemetry.metrics import (
    RECONCILER_ACTIONS,
    RECONCILER_SCANS,
    SLOT_RECOUNTS,
    WORKER_WRITES_REFUSED,
)

log = logging.getLogger(__name__)

JITTER = 0.2
# how often the outbox sweep also looks at parked joins (Outbox.check_joins: each join at
# most every JOIN_CHECK_MS): a few commands per queue, not four times a second
JOINS_CHECK_S = 1.0


class Reconciler:
    """Periodically applies the lease-expiry policy on every known queue."""

    def __init__(
        self,
        *,
        lease_store: LeaseStore,
        run_store: RunStore,
        queues: list[str],
        interval_s: float,
        schedules: SchedulePass | None = None,
        schedule_tick_s: float = 1.0,
        outbox_sweep_s: float | None = None,
    ) -> None:
        self._lease_store = lease_store
        self._run_store = run_store
        self._queues = queues
        self._interval_s = interval_s
        self._schedules = schedules
        self._schedule_tick_s = schedule_tick_s
        self.actions_total = 0
        self.slot_fixes_total = 0
        # the slot recount needs nothing the lease store lacks: same client and scripts
        self._flow = FlowStore(
            lease_store.client,
            scripts=lease_store.scripts,
            prefix=lease_store.prefix,
            events_maxlen=lease_store.events_maxlen,
        )
        self._sweep_at: dict[str, int] = {}  # per queue: where the listing-index sweep resumes
        self._outbox_sweep_s = outbox_sweep_s
        self._outbox = Outbox(run_store.ctx)
        self._builds = BuildStore(run_store.ctx)
        self._joins_due = 0.0  # monotonic: when the sweep next checks the parked joins

    async def run_forever(self) -> None:
        """Scan, sleep a jittered interval, repeat; survives Redis outages.

        The schedule pass, when given, runs beside it on its own interval.
        """
        passes = []
        if self._schedules is not None:
            passes.append(
                asyncio.create_task(
                    self._schedules.run_forever(self._schedule_tick_s), name="schedule-pass"
                )
            )
        if self._outbox_sweep_s is not None:
            passes.append(asyncio.create_task(self._sweep_outboxes(), name="outbox-sweep"))
        try:
            await self._scan_forever()
        finally:
            for task in passes:
                task.cancel()
            await asyncio.gather(*passes, return_exceptions=True)

    async def _sweep_outboxes(self) -> None:
        """Deliver what every queue's outbox holds, every ``outbox_sweep_s`` (jittered)."""
        assert self._outbox_sweep_s is not None
        # while Redis is away the sweep backs off (and logs) like every loop that waits for it
        refusals = REDIS_BACKOFF.streak()
        while True:
            await asyncio.sleep(self._outbox_sweep_s * random.uniform(1 - JITTER, 1 + JITTER))
            try:
                queues = set(self._queues) | set(await self._run_store.queues())
                await self._outbox.sweep(queues)
                if time.monotonic() >= self._joins_due:
                    self._joins_due = time.monotonic() + JOINS_CHECK_S
                    for queue in sorted(queues):
                        await self._outbox.check_joins(queue)
            except (RedisError, OSError) as exc:
                await refusals.wait(exc, what="outbox sweep", logger=log)
                continue
            refusals.reset()

    async def _scan_forever(self) -> None:
        failures = RepeatLog(REPEAT_LOG_EVERY_S)  # a pass a second or more, at maxmemory
        while True:
            await asyncio.sleep(self._interval_s * random.uniform(1 - JITTER, 1 + JITTER))
            try:
                await self.scan()
            except (RedisError, OSError) as exc:
                WORKER_WRITES_REFUSED.labels("reconcile", refusal_of(exc) or "error").inc()
                failures.log(log, logging.WARNING, "reconcile scan failed: %s", exc)

    async def scan(self) -> list[ReconcileAction]:
        """One pass over every queue; returns what was done."""
        queues = sorted(set(self._queues) | set(await self._run_store.queues()))
        done: list[ReconcileAction] = []
        for queue in queues:
            done.extend(await self._drain(queue, self._lease_store.reconcile))
            done.extend(await self._drain(queue, self._lease_store.expire_queued))
            self._sweep_at[queue] = await self._run_store.sweep_index(
                queue, self._sweep_at.get(queue, 0), RECONCILE_BATCH
            )
            await self._recount(queue)
        await self._note_unavailable_builds(queues)
        RECONCILER_SCANS.inc()
        self.actions_total += len(done)
        return done

    async def _note_unavailable_builds(self, queues: list[str]) -> None:
        """Tell the queued runs pinned to a build that no live, claiming worker of their
        queue has why they wait (issue 36): a `wait` event naming the build, once.

        Draining workers do not count: they claim nothing more. A deployment that pins
        nothing pays one round trip a scan (which queues have pinned runs), not the
        worker list and a script per queue.
        """
        pinned = await self._builds.queues_with_pins(queues)
        if not pinned:
            return
        store = self._run_store
        workers = await list_workers(store.client, store.prefix, store.lease_ttl_ms)
        for queue in pinned:
            live = {
                info.build_id
                for info in workers
                if info.alive and not info.draining and info.build_id and queue in info.queues
            }
            await self._builds.note_unavailable(queue, live)

    async def _recount(self, queue: str) -> None:
        """Set the queue's slot counters to what its leases hold; count and log any fix.

        After the expiry pass: a slot a dead worker held has been given back by then,
        so what is left to fix is drift (a bug, a restored snapshot), never a lease
        merely about to expire.
        """
        fixes, _woken = await self._flow.recount(queue)
        if fixes:
            SLOT_RECOUNTS.labels(queue).inc(len(fixes))
            self.slot_fixes_total += len(fixes)

    async def _drain(
        self, queue: str, step: Callable[[str], Awaitable[list[ReconcileAction]]]
    ) -> list[ReconcileAction]:
        """Call one batch step on a queue until it returns a short batch."""
        done: list[ReconcileAction] = []
        while True:
            actions = await step(queue)
            done.extend(actions)
            for action in actions:
                RECONCILER_ACTIONS.labels(queue, action.action).inc()
                log.warning(
                    "reconciled: %s",
                    action.action,
                    extra={"run_id": action.run_id, "fence": action.fence},
                )
            if len(actions) < RECONCILE_BATCH:
                return done


async def run_standalone(settings: Settings) -> None:
    """``leasehold reconciler``: reconcile every known queue until interrupted."""
    client = async_client(settings.resolved_redis_url())
    scripts = Scripts.for_settings(settings)
    lease_store = LeaseStore.for_settings(client, scripts, settings)
    run_store = RunStore.for_settings(client, scripts, settings)
    reconciler = Reconciler(
        lease_store=lease_store,
        run_store=run_store,
        queues=list(settings.queues),
        interval_s=settings.effective_reconcile_interval_s,
        schedules=SchedulePass.for_settings(run_store, settings),
        schedule_tick_s=settings.schedule_tick_s,
        outbox_sweep_s=settings.outbox_sweep_s,
    )
    log.info("reconciler scanning every %.2fs", settings.effective_reconcile_interval_s)
    try:
        await reconciler.run_forever()
    finally:
        await client.aclose()
