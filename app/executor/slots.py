"""Concurrency slots: how many more runs this worker may claim, and start.

Claims reserve slots *before* the round trip, so two queues' claims in flight
at once can never hold more runs than the limit. The limit is the concurrency
plus a **prefetch window**: runs claimed (leased, fenced, heartbeated, evented
like any other) while the current ones still run, so the next batch is in hand
when slots free and the round trip that fetched it overlapped with the work. At
most ``concurrency`` of them run at once (:attr:`Slots.run_gate`); the others
wait in the worker, in claim order.

The window is bounded twice: by ``LEASEHOLD_PREFETCH_MAX``, and by how long a
prefetched run would wait for a free slot at the recent run duration (an
exponential average): only as many as start within :data:`PREFETCH_WAIT_S`. A
worker of slow runs (a model call of seconds) so prefetches nothing and leaves
the queue to idle workers, and a worker prefetches nothing before its slots
turned over once (``concurrency`` runs ended): workers started together share a
short queue's first runs as they did without prefetch. The average lags a
change of workload: runs that turn slow hold the window their short
predecessors opened until they end (a prefetched run then waits up to one slow
run's duration).
"""

from __future__ import annotations

import asyncio
from collections import deque

PREFETCH_WAIT_S = 0.05  # the longest a prefetched run is expected to wait for a slot
DURATION_WEIGHT = 0.1  # weight of the newest run in the average duration
ENDED_COUNTED = 1_000_000  # runs counted for the first turnover and the plain mean


class Slots:
    """A counter of claimable run slots: the concurrency, plus the prefetch window."""

    def __init__(self, capacity: int, *, prefetch_max: int = 0) -> None:
        self.capacity = capacity
        self.prefetch_max = prefetch_max
        self._used = 0
        self._window = 0  # prefetched runs allowed now (see the module docstring)
        self._mean_run_s = 0.0
        self._ended = 0  # runs that left their slot, counted up to ENDED_COUNTED
        # at most ``capacity`` runs execute at once, prefetched ones wait here in order
        self.run_gate = RunGate(capacity)

    @property
    def free(self) -> int:
        """Slots a claim may still reserve: neither reserved nor held by a run."""
        return max(0, self.capacity + self._window - self._used)

    @property
    def busy(self) -> int:
        """Slots in use (runs held, running or prefetched, plus claims in flight)."""
        return self._used

    @property
    def window(self) -> int:
        """How many runs beyond the concurrency a claim may take now."""
        return self._window

    def reserve(self, wanted: int) -> int:
        """Take up to ``wanted`` slots; returns how many were taken."""
        taken = min(wanted, self.free)
        self._used += taken
        return taken

    def give_back(self, count: int = 1) -> None:
        """Return slots (a run left its slot, or a claim got fewer runs than reserved)."""
        if count > 0:
            self._used = max(0, self._used - count)

    def ran(self, seconds: float) -> None:
        """A run held its slot ``seconds``: the prefetch window follows the average."""
        if self.prefetch_max <= 0:
            return
        if self._ended < ENDED_COUNTED:
            self._ended += 1
        # the plain mean of the first runs, then an exponential one (no first-run bias)
        weight = max(DURATION_WEIGHT, 1 / self._ended)
        mean = self._mean_run_s = self._mean_run_s + weight * (seconds - self._mean_run_s)
        if self._ended < self.capacity:
            return  # not one turnover of the slots yet: no window
        # a prefetched run k places back waits about k / capacity run durations
        fits = self.capacity * PREFETCH_WAIT_S / mean if mean > 0 else float(self.prefetch_max)
        self._window = min(self.prefetch_max, int(fits))


class RunGate:
    """At most ``capacity`` runs inside at once; the others wait their turn, first come first.

    ``asyncio.Semaphore`` would do, but in Python 3.11 each ``acquire`` scans all
    its waiters (``locked()``): with a full prefetch window that is per run, for
    every run. Here a free slot is a counter and a waiter one future in a queue.
    """

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_enter(self) -> bool:
        """Take a slot if one is free now and nobody waits for one; False otherwise."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def enter(self) -> None:
        """Take a slot, waiting for one in arrival order; cancellable while it waits."""
        if self.try_enter():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # the slot was handed over as the cancel came: pass it on
            raise

    def leave(self) -> None:
        """Give a slot back: to the first run still waiting, else to the counter."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
