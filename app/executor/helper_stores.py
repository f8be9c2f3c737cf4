"""The stores a run's helpers write through: one set per worker, each made on first use.

A run that checkpoints, records an effect, waits durably or takes rate-limit tokens
reaches one of these through its helpers (:class:`app.executor.context.RunHelpers`);
a plain run reaches none. So each store, and its module, is made by the first run
that needs it, not by the worker's start: the progress, wait and rate-limit stores'
modules were ~2 % of a worker's start before its first claim (issue 19 aim 2). Made
from the event loop only (the helpers are), so each is made once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.store.context import StoreContext
    from app.store.progress.store import ProgressStore
    from app.store.ratelimits.store import RateLimitStore
    from app.store.waits.store import WaitStore


class HelperStores:
    """The worker's progress, wait and rate-limit stores, over its one store context."""

    def __init__(self, stores: StoreContext, *, max_waits: int, max_rate_limits: int) -> None:
        self._stores = stores
        self._max_waits = max_waits
        self._max_rate_limits = max_rate_limits

    @functools.cached_property
    def progress(self) -> ProgressStore:
        """Checkpoints and effect records (``ctx.checkpoint``, ``ctx.effect``)."""
        from app.store.progress.store import ProgressStore

        return ProgressStore(self._stores)

    @functools.cached_property
    def waits(self) -> WaitStore:
        """Durable sleeps, signals and questions, at most ``max_waits`` per run."""
        from app.store.waits.store import WaitStore

        return WaitStore(self._stores, max_waits=self._max_waits)

    @functools.cached_property
    def rate_limits(self) -> RateLimitStore:
        """The shared token buckets (``ctx.rate_limit``), at most ``max_rate_limits`` keys."""
        from app.store.ratelimits.store import RateLimitStore

        stores = self._stores
        return RateLimitStore(
            stores.client,
            scripts=stores.scripts,
            prefix=stores.prefix,
            max_keys=self._max_rate_limits,
        )
