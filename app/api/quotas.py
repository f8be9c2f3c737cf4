"""A namespace's quotas, judged where each resource is written: 429 naming the quota.

Counts that are costly to take exactly (live runs, stored bytes) are judged against a
measurement at most LEASEHOLD_QUOTA_USAGE_TTL_S old, plus what this process admitted
since (as :class:`app.store.admission.MemoryAdmission` does with memory): a burst from
several API processes can pass a count quota by what they admit within that window,
never more. Rates (creates, signals) are GCRA buckets in Redis, shared by every API
process and exact. Counts of declared things (queues, schedules) are passed to the
declaring script as its bound, so they hold atomically.

A refusal is also remembered until it can next pass (a rate's bucket refills one
token, the next usage measurement): meanwhile :meth:`QuotaGuard.refusing` answers the
same 429 from the middleware, before the body is read or Redis is asked, so a tenant
hammering past its quota costs the API process little more than an authentication.
Listings in flight are counted per API process (``listings_in_flight``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from app.errors import QuotaExceeded
from app.models.namespaces import Quotas
from app.store.namespaces.store import Held
from app.store.ratelimits.store import RateLimitStore

# the routes a remembered refusal answers before they read anything, by refusal kind
QUOTED_ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/runs"): "creates",
    ("POST", "/runs/batch"): "creates",
    ("POST", "/runs/{run_id}/retry"): "creates",
    ("POST", "/schedules/{schedule_id}/trigger"): "creates",
    ("POST", "/schedules/{schedule_id}/backfill"): "creates",
    ("POST", "/runs/{run_id}/signals/{name}"): "signals",
}


class QuotaGuard:
    """The quotas of one namespace, as one API process applies them."""

    def __init__(
        self,
        namespace: str,
        *,
        quotas: Callable[[], Awaitable[Quotas]],
        measure: Callable[[bool, bool], Awaitable[Held]],
        buckets: RateLimitStore,
        usage_ttl_s: float,
    ) -> None:
        self.namespace = namespace
        self._quotas = quotas
        self._measure = measure
        self._buckets = buckets
        self.usage_ttl_s = usage_ttl_s
        self._held: Held | None = None
        self._complete = False  # whether _held measured live runs and stored bytes both
        self.measured_at = datetime.now(UTC)  # when _held was measured (this host's clock)
        self._measured_at = -math.inf
        self._admitted_runs = 0
        self._lock = asyncio.Lock()
        # what a create (or a signal) is refused with until when (monotonic), by kind
        self._refusing: dict[str, tuple[float, QuotaExceeded]] = {}
        self._listings = 0

    def refusing(self, kind: str) -> QuotaExceeded | None:
        """The refusal a ``creates`` (or ``signals``) request gets now without being read,
        or None: it may pass, and is judged in full."""
        found = self._refusing.get(kind)
        if found is None:
            return None
        until, refusal = found
        left = until - time.monotonic()
        if left <= 0:
            del self._refusing[kind]
            return None
        refusal.retry_after_s = max(1, math.ceil(left))
        return refusal

    def _remember(self, kind: str, refusal: QuotaExceeded, for_s: float) -> QuotaExceeded:
        self._refusing[kind] = (time.monotonic() + for_s, refusal)
        return refusal

    @contextlib.asynccontextmanager
    async def listing(self) -> AsyncIterator[None]:
        """Hold one of the namespace's ``listings_in_flight`` in this process, or raise
        :class:`QuotaExceeded` (429) when they are all taken."""
        limit = (await self.quotas()).listings_in_flight
        if limit is not None and self._listings >= limit:
            raise self._over("listings_in_flight", limit, "are all in flight", retry_s=1)
        self._listings += 1
        try:
            yield
        finally:
            self._listings -= 1

    async def quotas(self) -> Quotas:
        """The namespace's quotas now (cached by the namespace directory)."""
        return await self._quotas()

    async def held(self, *, complete: bool = False) -> Held:
        """What the namespace holds, measured at most ``usage_ttl_s`` ago: live runs and
        stored bytes only when a quota asks for them, or (``complete``, what GET
        /namespaces/{name} shows) both. However often it is asked, one measurement per
        ``usage_ttl_s`` at most: a measurement reads every queue of the namespace."""
        async with self._lock:  # one measurement at a time, however many creates wait
            stale = time.monotonic() - self._measured_at >= self.usage_ttl_s
            if stale or (complete and not self._complete):
                quotas = await self.quotas()
                runs = complete or quotas.live_runs is not None
                stored = complete or quotas.stored_bytes is not None
                self._held = await self._measure(runs, stored)
                self._measured_at = time.monotonic()
                self._complete = runs and stored
                self.measured_at = datetime.now(UTC)
                self._admitted_runs = 0
            assert self._held is not None
            return self._held

    async def admit_runs(self, count: int = 1) -> None:
        """Raise :class:`QuotaExceeded` unless ``count`` new runs fit every quota on
        creates: live runs, stored bytes, creates per second (taken last: a create the
        counts refuse costs no token)."""
        quotas = await self.quotas()
        if quotas.live_runs is not None or quotas.stored_bytes is not None:
            held = await self.held()
            live = held.live_runs + self._admitted_runs
            # until the next measurement nothing of this refusal can change here
            next_measure_s = self._measured_at + self.usage_ttl_s - time.monotonic()
            if quotas.live_runs is not None and live + count > quotas.live_runs:
                refusal = self._over("live_runs", quotas.live_runs, f"holds {live} live runs")
                if live >= quotas.live_runs:  # a single create is refused too
                    self._remember("creates", refusal, next_measure_s)
                raise refusal
            if quotas.stored_bytes is not None and held.stored_bytes >= quotas.stored_bytes:
                stored = held.stored_bytes
                refusal = self._over("stored_bytes", quotas.stored_bytes, f"holds {stored} bytes")
                raise self._remember("creates", refusal, next_measure_s)
        if quotas.creates_per_s is not None:
            await self._take("creates", "creates_per_s", quotas.creates_per_s, count)
        self._admitted_runs += count

    async def admit_signal(self) -> None:
        """Raise :class:`QuotaExceeded` past the namespace's signals per second."""
        quotas = await self.quotas()
        if quotas.signals_per_s is not None:
            await self._take("signals", "signals_per_s", quotas.signals_per_s, 1)

    async def bound(self, quota: str, deployment_bound: int) -> tuple[int, bool]:
        """The bound a declaring script applies for ``quota`` (``queues``, ``schedules``)
        and whether the namespace's quota is what sets it (then a refusal is a 429)."""
        limit: int | None = getattr(await self.quotas(), quota)
        if limit is not None and limit < deployment_bound:
            return limit, True
        return deployment_bound, False

    def over_count(self, quota: str, limit: int) -> QuotaExceeded:
        """The refusal of a declaration past the namespace's ``quota`` of ``limit``."""
        return self._over(quota, limit, f"allows {limit}: delete one first", retry_s=60)

    async def _take(self, bucket: str, quota: str, per_second: int, cost: int) -> None:
        if cost > per_second:
            raise self._over(quota, per_second, f"is below this request's {cost}: send fewer")
        token = await self._buckets.take_quota(bucket, per_second=per_second, cost=cost)
        if not token.granted:
            retry_s = math.ceil(token.wait_ms / 1000)
            refusal = self._over(quota, per_second, "is used up for now", retry_s=retry_s)
            if cost == 1:  # no token before then: every request of this kind is refused
                self._remember(bucket, refusal, token.wait_ms / 1000)
            raise refusal

    def _over(
        self, quota: str, limit: int, detail: str, *, retry_s: int | None = None
    ) -> QuotaExceeded:
        retry = retry_s if retry_s is not None else math.ceil(self.usage_ttl_s)
        return QuotaExceeded(
            namespace=self.namespace, quota=quota, limit=limit, detail=detail, retry_after_s=retry
        )
