"""What a worker's runs build their helpers from, made from its settings once per worker.

Every run's helpers (:class:`app.executor.context.RunHelpers`: events, effects,
waits, rate limits, spawns) share one :class:`HelperDeps`: the worker's stores and
the bounds its settings set. This module is the one place that maps those settings
onto the helpers' bounds, so the worker's module holds its life (start, claims,
drain) and not every helper's limit.

What ``ctx.spawn`` shares (:class:`~app.executor.children.FamilyDeps`) is built by a
worker's first spawn, not here at start-up: its modules (the family, the child and
run stores, the outbox) are ~4 % of a worker's start that a plain run never uses
(issue 19 aim 2).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.executor.context import HelperDeps
from app.executor.helper_stores import HelperStores
from app.handlers import HandlerRegistry
from app.settings import Settings
from app.store.context import StoreContext
from app.store.leases.store import LeaseStore
from app.store.queues.store import QueueStore
from app.supervision.config import Supervision

if TYPE_CHECKING:
    from app.executor.children import FamilyDeps
    from app.store.signing.store import SigningKeys


def helper_deps(
    settings: Settings,
    *,
    lease_store: LeaseStore,
    stores: StoreContext,
    registry: HandlerRegistry,
) -> HelperDeps:
    """The stores and bounds every run's helpers share; spawns' share is built lazily."""
    return HelperDeps(
        lease_store=lease_store,
        stores=HelperStores(
            stores,
            max_waits=settings.max_waits_per_run,
            max_rate_limits=settings.max_rate_limits,
        ),
        rate_limit_max_wait_ms=round(settings.rate_limit_max_wait_s * 1000),
        supervision=Supervision.from_settings(settings),
        max_event_bytes=settings.max_event_bytes,
        max_checkpoint_bytes=settings.max_checkpoint_bytes,
        max_wait_s=settings.max_wait_s,
        family=family_deps(settings, stores, registry),
        signing=signing_keys(settings, stores),
        lease_token_max_ms=round(settings.lease_token_max_s * 1000),
        namespace=settings.namespace,
    )


def signing_keys(settings: Settings, stores: StoreContext) -> Callable[[], SigningKeys]:
    """The signing room for ``ctx.lease_token``, built by the worker's first token (its
    modules load cryptography, which a worker that signs nothing never needs)."""

    @functools.cache
    def build() -> SigningKeys:
        from app.store.signing.store import SigningKeys

        return SigningKeys.for_settings(stores.client, settings)

    return build


def family_deps(
    settings: Settings, stores: StoreContext, registry: HandlerRegistry
) -> Callable[[], FamilyDeps]:
    """What ``ctx.spawn`` shares (the child store, queues, registry, bounds, defaults),
    built by the worker's first spawn and shared from then on.

    The builder is called from the event loop only (``RunHelpers``), so it is built once.
    """

    @functools.cache
    def build() -> FamilyDeps:
        from app.executor.children import FamilyDeps
        from app.store.admission import MemoryAdmission
        from app.store.family.children import ChildStore, SpawnLimits
        from app.store.outbox.store import Outbox

        return FamilyDeps(
            store=ChildStore(stores, max_waits=settings.max_waits_per_run),
            queues=QueueStore.for_settings(stores.client, stores.scripts, settings),
            registry=registry,
            limits=SpawnLimits(settings.max_children_per_run, settings.max_run_depth),
            max_input_bytes=settings.max_input_bytes,
            max_metadata_bytes=settings.max_metadata_bytes,
            default_max_attempts=settings.default_max_attempts,
            default_on_lease_expired=settings.default_on_lease_expired,
            default_versioning=settings.default_versioning,
            outbox=Outbox(stores),
            max_wait_s=settings.max_wait_s,
            admission=MemoryAdmission(
                stores.client,
                high_water=settings.memory_high_water,
                interval_s=settings.memory_check_interval_s,
            ),
        )

    return build
