"""The heartbeat: renews every lease of the process every TTL/3, on its own thread.

It has its own thread and its own blocking Redis connection so that a handler
that holds the event loop (CPU work, a sync call) cannot stop its lease from
being renewed: slow is not dead. Each beat costs one round trip per queue,
however many runs the worker holds, and re-advertises the worker in the
registry in the same pipeline of work.

Event-loop lag is measured here too (a callback posted to the loop and timed)
and reported as evidence, never used as a reason to give up a lease.

**Jeopardy**: when renewals fail (Redis unreachable, partition), a lease is
assumed lost once ``TTL - safety margin`` has passed since Redis last confirmed
it, by this process's monotonic clock. The run is then stopped *without
writing*: the reconciler will apply the policy once the lease expires in Redis.
A failed round is *not* tried again sooner, with or without the backoff of
:mod:`app.retry`: its retry is the next beat. Against a silent Redis every call
blocks for the socket timeout, so a retry started shortly before the jeopardy
deadline would push the stop past it. A fleet's beats do not come in one wave
either way: each worker's phase is set by when it started.

Renewals are never refused for memory (``renew_leases`` runs with ``allow-oom``:
it only rewrites the expiry of leases that exist). A renewal refused all the
same (read-only after a failover, or an older Redis) is logged and counted with
its reason, so a jeopardy that follows never comes unexplained.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import RedisClusterException, RedisError

from app.executor.reasons import StopReason
from app.executor.table import LeaseTable
from app.retry import REPEAT_LOG_EVERY_S, RepeatLog
from app.store.leases.store import LeaseRenewer
from app.store.lua.transition import LeaseAnswer
from app.store.redis.refusals import describe, refusal_of
from app.telemetry.metrics import (
    LEASE_RENEWALS,
    RENEW_SECONDS,
    RENEWAL_FAILURES,
    WORKER_WRITES_REFUSED,
)

log = logging.getLogger(__name__)

MIN_WAIT_S = 0.005
# what a renewal may raise while Redis is unavailable; redis-py's sync cluster client
# raises RedisClusterException (not a RedisError) while its slot map cannot be built
# mid-failover, and that must count as a failed renewal, so that jeopardy applies
UNAVAILABLE = (RedisError, OSError, RedisClusterException)


@dataclass(frozen=True)
class HeartbeatCallbacks:
    """How the heartbeat reports to the event loop (called via call_soon_threadsafe)."""

    lease_lost: Callable[[str, StopReason], None]  # (run_id, LEASE_LOST or JEOPARDY)
    cancel_requested: Callable[[str], None]
    beat_done: Callable[[float], None]  # loop lag in ms, measured on this beat


class Heartbeat(threading.Thread):
    """Daemon thread renewing the worker's leases every ``interval_s``."""

    def __init__(
        self,
        *,
        table: LeaseTable,
        renewer: LeaseRenewer,
        loop: asyncio.AbstractEventLoop,
        callbacks: HeartbeatCallbacks,
        interval_s: float,
        jeopardy_after_s: float,
        advertise: Callable[[float], None],
    ) -> None:
        super().__init__(name="leasehold-heartbeat", daemon=True)
        self._table = table
        self._renewer = renewer
        self._loop = loop
        self._callbacks = callbacks
        self._interval_s = interval_s
        self._jeopardy_after_s = jeopardy_after_s
        self._advertise = advertise
        self._stopped = threading.Event()
        self._failing = False
        self._advertise_failures = RepeatLog(REPEAT_LOG_EVERY_S)  # each beat, at maxmemory
        self._lag_probe_sent: float | None = None
        self._lag_probe_seen: float | None = None
        self.loop_lag_ms = 0.0

    def stop(self) -> None:
        """Ask the thread to finish after its current beat."""
        self._stopped.set()

    def run(self) -> None:
        """Beat until stopped; never raises (a dead heartbeat would orphan every run)."""
        next_beat = time.monotonic()
        while not self._stopped.is_set():
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + self._interval_s
                try:
                    self.beat()
                except Exception:  # a bug here must not kill the thread
                    log.exception("heartbeat beat failed")
            self._check_jeopardy()
            self._stopped.wait(max(MIN_WAIT_S, self._next_wake(next_beat) - time.monotonic()))

    def _next_wake(self, next_beat: float) -> float:
        if not self._failing:
            return next_beat
        oldest = self._table.earliest_confirmation()
        if oldest is None:
            return next_beat
        return min(next_beat, oldest + self._jeopardy_after_s)

    def beat(self) -> None:
        """One round: measure loop lag, renew every queue's leases, advertise.

        A failed renewal is followed at once by the jeopardy check, and the round
        then skips the advertisement, so no second blocking call stands between a
        silent Redis and the jeopardy deadline.
        """
        self.loop_lag_ms = self._measure_lag()
        failed = False
        for queue, leases in self._table.snapshot().items():
            sent_at = time.monotonic()
            try:
                answers = self._renewer.renew(leases)
            except UNAVAILABLE as exc:
                RENEWAL_FAILURES.inc()
                WORKER_WRITES_REFUSED.labels("renewal", refusal_of(exc) or "error").inc()
                log.warning("lease renewal failed on queue %s (%s): %s", queue, describe(exc), exc)
                failed = self._failing = True
                # decide now: the next call may block for a whole socket timeout too
                self._check_jeopardy()
                continue
            RENEW_SECONDS.labels(queue).observe(time.monotonic() - sent_at)
            LEASE_RENEWALS.labels(queue).inc(len(leases))
            self._apply(answers, sent_at)
        self._failing = failed
        if not failed:
            # skipped while renewals fail: against a silent Redis it would block for another
            # socket timeout and push the jeopardy check to the lease's expiry. Leases that
            # cannot be renewed are dropped within a TTL, well inside the advertisement's life.
            self._advertise_quietly()
        self._loop.call_soon_threadsafe(self._callbacks.beat_done, self.loop_lag_ms)

    def _advertise_quietly(self) -> None:
        try:
            self._advertise(self.loop_lag_ms)
        except UNAVAILABLE as exc:
            WORKER_WRITES_REFUSED.labels("advertisement", refusal_of(exc) or "error").inc()
            self._advertise_failures.log(
                log, logging.WARNING, "worker advertisement failed: %s", exc
            )

    def _apply(self, answers: dict[str, LeaseAnswer], sent_at: float) -> None:
        renewed = [run_id for run_id, code in answers.items() if code != LeaseAnswer.LOST]
        self._table.confirm(renewed, sent_at)
        for run_id, code in answers.items():
            if code == LeaseAnswer.LOST:
                self._table.remove(run_id)
                self._loop.call_soon_threadsafe(
                    self._callbacks.lease_lost, run_id, StopReason.LEASE_LOST
                )
            elif code == LeaseAnswer.CANCEL:
                self._loop.call_soon_threadsafe(self._callbacks.cancel_requested, run_id)

    def _check_jeopardy(self) -> None:
        if not self._failing:
            return
        for run_id in self._table.in_jeopardy(self._jeopardy_after_s):
            log.error(
                "lease in jeopardy: no renewal for %.2fs, stopping run without writing",
                self._jeopardy_after_s,
                extra={"run_id": run_id},
            )
            self._table.remove(run_id)
            self._loop.call_soon_threadsafe(self._callbacks.lease_lost, run_id, StopReason.JEOPARDY)

    def _measure_lag(self) -> float:
        """Lag of the previous probe (or how long it has been pending); posts a new one."""
        now = time.monotonic()
        lag = 0.0
        if self._lag_probe_sent is not None:
            seen = self._lag_probe_seen
            lag = (seen if seen is not None else now) - self._lag_probe_sent
        self._lag_probe_sent = now
        self._lag_probe_seen = None
        self._loop.call_soon_threadsafe(self._record_probe)
        return max(0.0, lag * 1000)

    def _record_probe(self) -> None:
        self._lag_probe_seen = time.monotonic()
