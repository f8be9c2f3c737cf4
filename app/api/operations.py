"""Driving bulk retries: one asyncio task per operation, one saved step at a time.

A step lists the next ``LEASEHOLD_RETRY_BATCH_SIZE`` runs the filter's queue,
status and handler select (newest first, from the saved cursor, never a run created
after the operation started), keeps those the whole filter matches, re-runs them in
one pipeline of ``retry_run`` calls and saves the cursor and counters with
``commit_operation`` (which also renews this process's lease on the operation).

Why it is safe to repeat: each re-run carries the idempotency key
``op.<operation id>.<run's ULID>``, so a step done again after a crash (its
re-runs written, its save lost) answers the same new runs instead of making more;
and a run re-run by anyone else is skipped (``AlreadyRetried``). So a stalled
operation (its process died) is resumed from its last saved step by any API
process (``POST /operations/{id}/resume``) without re-running anything twice.

One process drives at most ``LEASEHOLD_RETRY_OPERATIONS_MAX`` operations at once
(more: 503 with Retry-After); each step is bounded by the batch size and the
listing's own scan budget, and the whole operation by its ``limit``. Each step's
re-runs are admitted like creates (:mod:`app.store.admission`), all together: past
the high-water mark the step waits, its cursor unmoved and ``last_error`` saying
why (each save renews the driver's lease), and goes on once memory frees. An
operation that ends having re-run nothing is kept only
``LEASEHOLD_OPERATION_EMPTY_RETENTION_S``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field

from fastapi import HTTPException
from redis.exceptions import RedisError

from app.api.quotas import QuotaGuard
from app.errors import MemoryPressure, OperationConflict, QuotaExceeded, StoreError
from app.models import RETRYABLE_STATUSES, Run, RunStatus
from app.models.read import RetriedPair
from app.settings import Settings
from app.store.admission import WAIT_POLL_S, MemoryAdmission, create_cost_bytes
from app.store.codec import dumps
from app.store.operations.store import OperationStore, Progress
from app.store.runs.listing import ScanBudget
from app.store.runs.reruns import Rerun, retry_call, settle
from app.store.runs.store import RunStore
from app.telemetry.metrics import RETRY_OPERATIONS_RUNNING

log = logging.getLogger(__name__)

RECENT_KEPT = 20
MEMORY_WAIT = "waiting for Redis memory"
QUOTA_WAIT = "waiting for the namespace's quota"
RETRY_AFTER_S = 5


@dataclass
class RetryDrivers:
    """The bulk retries this API process drives, at most ``max_running`` at once."""

    runs: RunStore
    operations: OperationStore
    admission: MemoryAdmission
    batch_size: int
    max_running: int
    lease_ms: int
    scan_budget: ScanBudget = field(default_factory=ScanBudget)
    # the namespace's quotas: each step's re-runs count against live runs and creates/s
    quota: QuotaGuard | None = None
    driver: str = field(default_factory=lambda: f"api-{secrets.token_hex(6)}")
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    @classmethod
    def for_settings(
        cls,
        runs: RunStore,
        settings: Settings,
        admission: MemoryAdmission,
        quota: QuotaGuard | None = None,
    ) -> RetryDrivers:
        """Drivers on ``runs``' Redis, bounded and paced by ``settings``.

        The lease on an operation lasts one run lease TTL: the same "is it alive"
        detector a worker's run has, renewed by every saved step.
        """
        operations = OperationStore(
            runs.client,
            scripts=runs.scripts,
            prefix=runs.prefix,
            retention_ms=max(1, round(settings.operation_retention_s * 1000)),
            empty_retention_ms=max(1, round(settings.operation_empty_retention_s * 1000)),
        )
        return cls(
            runs,
            operations,
            admission,
            batch_size=settings.retry_batch_size,
            max_running=settings.retry_operations_max,
            lease_ms=settings.lease_ttl_ms,
            scan_budget=ScanBudget.for_settings(settings),
            quota=quota,
        )

    def admit(self) -> None:
        """Raise a 503 (Retry-After) when this process drives as many as it may."""
        if len(self.running) >= self.max_running:
            raise HTTPException(
                503,
                f"this API process drives {len(self.running)} bulk retries, its most "
                "(LEASEHOLD_RETRY_OPERATIONS_MAX); retry shortly",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )

    async def start(self, progress: Progress) -> None:
        """Take the operation's lease (its first save) and drive it in a task of its own.

        Raises :class:`OperationConflict` when another live driver holds it or it is
        no longer running; nothing starts then.
        """
        self.admit()
        await self._save(progress)
        task = asyncio.create_task(self._drive(progress), name=f"retry-op:{progress.operation_id}")
        self.running[progress.operation_id] = task
        RETRY_OPERATIONS_RUNNING.set(len(self.running))
        task.add_done_callback(lambda _: self._finished(progress.operation_id))

    def _finished(self, operation_id: str) -> None:
        self.running.pop(operation_id, None)
        RETRY_OPERATIONS_RUNNING.set(len(self.running))

    async def close(self) -> None:
        """Stop every driver (their leases run out; a resume goes on from the last step)."""
        for task in list(self.running.values()):
            task.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)

    async def _drive(self, progress: Progress) -> None:
        try:
            while not await self.step(progress):
                pass
        except OperationConflict as exc:
            log.info("bulk retry stopped: %s", exc)  # cancelled, or taken over
        except (RedisError, OSError, StoreError) as exc:
            log.warning("bulk retry %s stalled: %s", progress.operation_id, exc)

    async def step(self, progress: Progress) -> bool:
        """Do one step and save it; True when the operation is done."""
        wanted = progress.filter
        page = await self.runs.list_runs(
            queue=wanted.queue,
            status=RunStatus(wanted.status[0]) if len(wanted.status) == 1 else None,
            handler=wanted.handler,
            limit=self.batch_size,
            cursor=progress.cursor,
            created_before_ms=progress.created_before_ms,
            budget=self.scan_budget,
        )
        progress.counts["looked_at"] += len(page.items)
        room = progress.limit - progress.counts["retried"]
        chosen = [run for run in page.items if wanted.matches(run)][: max(0, room)]
        progress.counts["matched"] += len(chosen)
        retryable = [run for run in chosen if run.status in RETRYABLE_STATUSES]
        await self._room_for(progress, retryable)
        await self._retry(progress, retryable)
        progress.cursor = page.next_cursor
        progress.counts["steps"] += 1
        done = page.next_cursor is None or progress.counts["retried"] >= progress.limit
        await self._save(progress, done=done)
        return done

    async def _room_for(self, progress: Progress, chosen: list[Run]) -> None:
        """Wait until memory and the namespace's quotas have room for every re-run of the
        step, saving why meanwhile.

        Each save renews the driver's lease, so a waiting operation is not ``stalled``;
        a cancel ends the wait at the next save (:class:`OperationConflict`).
        """
        cost = sum(create_cost_bytes(len(dumps(run.input).encode())) for run in chosen)
        waited = False
        while chosen:
            try:
                await self.admission.admit(cost)
                if self.quota is not None:
                    await self.quota.admit_runs(len(chosen))
            except (MemoryPressure, QuotaExceeded) as exc:
                why = MEMORY_WAIT if isinstance(exc, MemoryPressure) else QUOTA_WAIT
                waited, progress.last_error = True, f"{why}: {exc}"[:500]
                await self._save(progress)
                await asyncio.sleep(WAIT_POLL_S)
                continue
            if waited:
                progress.last_error = None  # the step's own save says it goes on
            return

    async def _retry(self, progress: Progress, chosen: list[Run]) -> None:
        """Re-run ``chosen`` in one pipeline; count each outcome."""
        if not chosen:
            return
        reruns = [
            Rerun(
                run.id,
                checkpoint=progress.filter.checkpoint,
                idempotency_key=f"op.{progress.operation_id}.{run.id.rsplit('.', 1)[1]}",
            )
            for run in chosen
        ]
        calls = [retry_call(self.runs, rerun) for rerun in reruns]
        replies = await self.runs.scripts.pipeline(self.runs.client, calls, raise_on_error=False)
        for rerun, reply in zip(reruns, replies, strict=True):
            outcome = settle(rerun, reply)
            if isinstance(outcome, StoreError):
                progress.counts["skipped"] += 1  # re-run meanwhile, or no longer ended
            elif isinstance(outcome, Exception):
                progress.counts["errors"] += 1
                progress.last_error = f"{rerun.run_id}: {outcome}"[:500]
            else:
                progress.counts["retried"] += 1
                pair = RetriedPair(run_id=rerun.run_id, retried_as=outcome[0])
                progress.recent = [*progress.recent, pair][-RECENT_KEPT:]

    async def _save(self, progress: Progress, *, done: bool = False) -> None:
        fields: dict[str, str | int] = dict(progress.fields())
        if done:
            fields["status"] = "done"
        await self.operations.commit(
            progress.operation_id,
            driver=self.driver,
            lease_ms=self.lease_ms,
            fields=fields,
            empty=done and progress.counts["retried"] == 0,
        )
