"""Buffers a run's handler events and appends them in fenced, pipelined batches.

A token stream can emit thousands of events a second; one round trip each
would cap it at the Redis latency. Events are queued in order and a single
flusher per run sends what is pending in ``append_events`` calls of at most
:data:`MAX_BATCH` events while the handler keeps going. Order is kept because
one flusher sends batches one after another. The run flushes before its
terminal write, so the terminal event is always last. When Redis rejects a
batch as LOST, the run is stopped.

When Redis is out of memory it refuses appends (they are not ``allow-oom``: see
:mod:`app.store.lua.scripts`), and the batch is dropped and counted instead of
retried: a handler that keeps emitting must neither wait for memory nor hold
its own terminal write back, and the terminal event is written with the
outcome in any case. Other transient refusals (no answer, read-only during a
failover) are retried with backoff; an error no retry can cure drops the batch.

A batch is capped because a script holds Redis for its whole run: 10,000
appends in one call kept every other client (claims, renewals, other runs'
events) waiting ~30 ms on the benchmark machine, and could trim its own first
events before any follower read them. A handler that emits without awaiting
anything else yields once per full batch, so the flusher sends it while the
handler builds the next.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from app.errors import EventTooLarge, InvalidEvent, LeaseLost
from app.retry import REDIS_BACKOFF
from app.store.codec import dumps
from app.store.leases.store import Lease, LeaseStore
from app.store.redis.refusals import describe, refusal_of
from app.telemetry.metrics import EVENTS_DROPPED, WORKER_WRITES_REFUSED

log = logging.getLogger(__name__)

EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_.\-]{0,63}$")
# lifecycle events are written only by the scripts, with the state change they describe
RESERVED_EVENT_TYPES = frozenset(
    {
        "created",
        "claimed",
        "released",
        "requeued",
        "lease_expired",
        "checkpoint",
        "effect",
        "cancel_requested",
        "waiting_human",
        "resumed",
        "reconciliation_required",
        "resolved",
        "replay_unavailable",
        "succeeded",
        "failed",
        "cancelled",
        "orphaned",
        "expired",
        # written by the scripts with the change they describe (set_priority,
        # signal_run, child_ended), or by the API's tree stream only (never stored)
        "priority_changed",
        "signal",
        "child_ended",
        "tree_ended",
        "tree_truncated",
    }
)
HIGH_WATER = 10_000
MAX_BATCH = 1_000  # events per append_events call


class EventSink:
    """Ordered, batched, fenced event appends for one run."""

    def __init__(
        self,
        store: LeaseStore,
        lease: Lease,
        *,
        max_event_bytes: int,
        on_lost: Callable[[], None],
    ) -> None:
        self._store = store
        self._lease = lease
        self._max_event_bytes = max_event_bytes
        self._on_lost = on_lost
        self._pending: list[tuple[str, str]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._lost = False
        self.dropped = 0  # events Redis refused for memory (or a bug), counted, not retried
        self.last_event_id: str | None = None

    def validate(self, event_type: str, data: Any) -> str:
        """Check an event before queueing it; returns its JSON payload.

        Raises :class:`InvalidEvent` for a reserved or malformed type and
        :class:`EventTooLarge` when the payload exceeds the bound.
        """
        # fullmatch: with match, "$" also accepts a trailing newline ("token\n")
        if not EVENT_TYPE.fullmatch(event_type) or event_type in RESERVED_EVENT_TYPES:
            raise InvalidEvent(f"event type {event_type!r} is reserved or malformed")
        payload = dumps(data if data is not None else {})
        size = len(payload.encode())
        if size > self._max_event_bytes:
            raise EventTooLarge(event_type, size, self._max_event_bytes)
        return payload

    async def add(self, event_type: str, data: Any) -> None:
        """Queue an event; waits only when the backlog passes the high-water mark."""
        payload = self.validate(event_type, data)
        if self._lost:
            return
        self._pending.append((event_type, payload))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_all())
        if len(self._pending) > HIGH_WATER:
            await self.flush()
        elif len(self._pending) % MAX_BATCH == 0:
            await asyncio.sleep(0)  # a full batch is waiting: let the flusher take it

    async def flush(self) -> None:
        """Wait until every queued event is written (or the lease is lost)."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    async def _flush_all(self) -> None:
        streak = REDIS_BACKOFF.streak()
        while self._pending and not self._lost:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                self.last_event_id = await self._store.append_events(self._lease, batch)
            except LeaseLost:
                lease = self._lease
                log.warning(
                    "events rejected: lease lost",
                    extra={
                        "run_id": lease.run_id,
                        "owner_id": lease.owner_id,
                        "fence": lease.fence,
                    },
                )
                self._lost = True
                self._pending.clear()
                self._on_lost()
                return
            except (RedisError, OSError) as exc:
                if self._keep_for_retry(exc, batch):
                    await streak.wait(
                        exc,
                        what="event append",
                        why=describe(exc),
                        logger=log,
                        extra=self._log_extra,
                    )
                continue
            streak.reset()

    def _keep_for_retry(self, exc: BaseException, batch: list[tuple[str, str]]) -> bool:
        """Put a failed batch back to retry it (True), or drop it: out of memory, or a bug."""
        reason = refusal_of(exc)
        WORKER_WRITES_REFUSED.labels("events", reason or "error").inc()
        extra = self._log_extra
        if reason is None or reason == "out_of_memory":
            EVENTS_DROPPED.inc(len(batch))
            # the first drop of a run is a warning; the rest only count (a stream can be fast)
            level = logging.WARNING if not self.dropped else logging.DEBUG
            self.dropped += len(batch)
            log.log(
                level, "%d events dropped, Redis refused them: %s", len(batch), exc, extra=extra
            )
            return False
        self._pending[:0] = batch
        return True

    @property
    def _log_extra(self) -> dict[str, Any]:
        return {"run_id": self._lease.run_id, "fence": self._lease.fence}
