"""Admission control: no new run is written while Redis memory is past the high-water mark.

Redis under ``noeviction`` refuses writes only at 100 % of ``maxmemory``, and
then it refuses everyone, the runs already running included. Refusing new work
at ``LEASEHOLD_MEMORY_HIGH_WATER`` (85 % by default) keeps the rest as headroom
for leases, checkpoints and terminal writes. *Every* path that makes runs is
admitted here, judged on what it will write, whole or not at all: ``POST /runs``
and its batch form, re-runs and each step of a bulk re-run, schedule triggers,
backfills and the schedule pass's fires, spawns, and signals. A path a caller
waits on answers 503 with ``Retry-After``; the background ones (a schedule fire,
a bulk re-run's step, a spawn) wait and try again, and say so.

The reading is cached per process for ``LEASEHOLD_MEMORY_CHECK_INTERVAL_S`` and
refreshed by one caller at a time, so a burst costs at most one ``INFO memory``
per interval. Between two readings every write admitted adds its estimated cost
(twice its input, plus the record's fields) to the cached use, so a burst cannot
overshoot the mark by an interval's worth of creates: measured with 8 clients on
an 8 MB Redis, without it Redis itself refused creates before the API did. A
Redis that forbids INFO (some managed services) is admitted as if it had no
maxmemory; one that cannot be reached fails the write with the store's own error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import ResponseError

from app.errors import MemoryPressure
from app.store.redis.connection import AsyncRedis
from app.store.redis.memory import MemoryReading, read_memory
from app.telemetry.metrics import REDIS_MEMORY_MAX, REDIS_MEMORY_USED

log = logging.getLogger(__name__)

UNKNOWN = MemoryReading(0, 0)
# what a run costs Redis beyond its input: the record's other fields, the listing
# index, the created event, allocator overhead (measured: ~1.1 KB for an empty input)
RUN_OVERHEAD_BYTES = 2_048
# how often a background writer that was refused looks again (its own interval, not
# the cache's: a refused writer must not hold the reading fresh for everyone)
WAIT_POLL_S = 1.0


def create_cost_bytes(input_bytes: int) -> int:
    """A conservative estimate of the memory one create adds to Redis."""
    return 2 * input_bytes + RUN_OVERHEAD_BYTES


class MemoryAdmission:
    """Cached Redis memory reading of one process, and the check every new write passes.

    ``on_refused`` is called once per refusal (each process counts them in its own
    metric: the API's ``leasehold_creates_refused_total``, for instance).
    """

    def __init__(
        self,
        client: AsyncRedis,
        *,
        high_water: float,
        interval_s: float,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.high_water = high_water
        self._interval_s = interval_s
        self._on_refused = on_refused
        self._reading: MemoryReading | None = None
        self._read_at = 0.0
        self._admitted_bytes = 0  # estimated cost of the writes admitted since the reading
        self._lock = asyncio.Lock()

    async def reading(self) -> MemoryReading:
        """The last reading if younger than the interval, else a fresh one.

        Raises RedisError/OSError when Redis cannot answer at all.
        """
        if self._fresh():
            assert self._reading is not None
            return self._reading
        async with self._lock:  # one refresh at a time; the others use its result
            if not self._fresh():
                self._store(await self._read())
        assert self._reading is not None
        return self._reading

    async def refresh(self) -> MemoryReading:
        """Read now, whatever the cache holds (``/readyz``, ``/metrics``)."""
        reading = await self._read()
        self._store(reading)
        return reading

    async def admit(self, cost_bytes: int = RUN_OVERHEAD_BYTES) -> None:
        """Raise :class:`MemoryPressure` when writing ``cost_bytes`` would pass the mark.

        Judged on what the write adds, whole (a backfill of 500 fires is its 500 runs'
        cost, admitted together or not at all). ``cost_bytes`` (see
        :func:`create_cost_bytes`) counts against the cached reading once admitted,
        until the next reading measures it for real.
        """
        reading = await self.reading()
        used_bytes = reading.used_bytes + self._admitted_bytes
        if MemoryReading(used_bytes + cost_bytes, reading.max_bytes).past(self.high_water):
            if self._on_refused is not None:
                self._on_refused()
            raise MemoryPressure(
                used_bytes=used_bytes,
                max_bytes=reading.max_bytes,
                high_water=self.high_water,
                cost_bytes=cost_bytes,
            )
        self._admitted_bytes += cost_bytes

    async def wait_for_room(
        self,
        cost_bytes: int,
        *,
        on_wait: Callable[[MemoryPressure], Awaitable[None]] | None = None,
    ) -> None:
        """Admit ``cost_bytes``, waiting while memory is past the mark (background writers).

        ``on_wait`` is awaited once, with the first refusal, so the waiter can say
        what it waits for. Cancellation ends the wait (a cancelled run, a stopping
        process); Redis errors are raised as by :meth:`admit`.
        """
        told = False
        while True:
            try:
                await self.admit(cost_bytes)
                return
            except MemoryPressure as exc:
                if not told and on_wait is not None:
                    await on_wait(exc)
                told = True
            await asyncio.sleep(max(WAIT_POLL_S, self._interval_s))
            self._read_at = 0.0  # a fresh reading next time round

    def _fresh(self) -> bool:
        return self._reading is not None and time.monotonic() - self._read_at < self._interval_s

    def _store(self, reading: MemoryReading) -> None:
        self._reading, self._read_at = reading, time.monotonic()
        self._admitted_bytes = 0
        REDIS_MEMORY_USED.set(reading.used_bytes)
        REDIS_MEMORY_MAX.set(reading.max_bytes)

    async def _read(self) -> MemoryReading:
        try:
            return await read_memory(self._client)
        except ResponseError as exc:  # INFO refused (a managed service): admit, say why
            log.warning("cannot read Redis memory, new writes are not limited by it: %s", exc)
            return UNKNOWN
