"""What the API's lifespan builds once per process and every route shares, per namespace.

The process builds one :class:`ApiState` for its own namespace (LEASEHOLD_NAMESPACE)
and, on a namespace's first request, one more on that namespace's key prefix (its
stores, hubs, bulk-retry drivers and quota guard), sharing everything else: the Redis
clients, the scripts, the follower caps, the memory mark, the keys, the audit stream,
the signing room. A route asks :func:`api_state` and gets its request's namespace's
state: it never names a namespace itself, so it cannot forget one.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request

from app.api.activity import ActivityHub
from app.api.admission import StreamSlots
from app.api.hub import EventHub
from app.api.keyring import Keyring
from app.api.namespaces import NamespaceDirectory
from app.api.quotas import QuotaGuard
from app.handlers import HandlerRegistry
from app.namespaces import DEFAULT_NAMESPACE
from app.settings import Settings
from app.store.admission import MemoryAdmission
from app.store.audit.store import AuditStore
from app.store.context import StoreContext
from app.store.family.tree import TreeStore
from app.store.flow.store import FlowStore
from app.store.lua.scripts import Scripts
from app.store.queues.activity import ActivityStore
from app.store.queues.store import QueueStore
from app.store.ratelimits.store import RateLimitStore
from app.store.redis.connection import AsyncRedis
from app.store.runs.store import RunStore
from app.store.signing.store import SigningKeys
from app.telemetry.metrics import CREATES_REFUSED

if TYPE_CHECKING:
    from app.api.operations import RetryDrivers


@dataclass
class ApiState:
    """The Redis client, scripts, store and handler registry of one API process."""

    settings: Settings
    client: AsyncRedis
    scripts: Scripts
    store: RunStore
    registry: HandlerRegistry
    hub: EventHub
    # followers of the queues' activity streams (the console's live runs view)
    activity: ActivityHub
    # the declared queues: runs may be created only on these
    queues: QueueStore
    # SSE responses being served: one slot each, LEASEHOLD_SSE_MAX_FOLLOWERS in all
    slots: StreamSlots
    # refuses creates while Redis memory is past the high-water mark
    memory: MemoryAdmission
    # declared rate-limit keys: start gates of created runs, and GET /rate-limits
    rate_limits: RateLimitStore
    # tree streams being served: LEASEHOLD_SSE_MAX_TREE_STREAMS, each one of `slots` too
    tree_slots: StreamSlots
    # the tree streams' rounds, on a small pool of their own: polls never wait for (or
    # starve) the requests' connections
    tree_streams: TreeStore
    # stored API keys (POST /keys), looked up by the auth middleware through a TTL cache
    keyring: Keyring
    # operate/admin calls, appended by the auth middleware, read by GET /audit
    audit: AuditStore
    # the signing room: the JWKS, stream tokens
    signing: SigningKeys
    # the namespaces (cached records: that one exists, its quotas)
    directory: NamespaceDirectory
    # this namespace's quotas, judged where creates, signals and declarations write
    quota: QuotaGuard
    # the bulk retries this process drives in this namespace (POST /runs/retry)
    retries: RetryDrivers
    # the clients a namespace's hubs and tree streams are built on
    stream_client: AsyncRedis
    tree_client: AsyncRedis
    # detached work (e.g. cancel-on-disconnect) that no request may cancel
    background: set[asyncio.Task[object]] = field(default_factory=set)
    # every namespace's state this process built, its own included (shared by all)
    namespaced: dict[str, ApiState] = field(default_factory=dict)

    def for_namespace(self, name: str) -> ApiState:
        """This process's state for namespace ``name``, built on its first request (no
        I/O: the stores open nothing until used)."""
        if name == self.settings.namespace:
            return self
        found = self.namespaced.get(name)
        if found is None:
            # LEASEHOLD_QUEUES are this process's own namespace's: another's queues are
            # the ones it declared (PUT /queues, or its workers' LEASEHOLD_QUEUES)
            settings = self.settings.model_copy(update={"namespace": name, "queues": []})
            found = dataclasses.replace(
                self, **namespace_members(settings, self.client, self.scripts, self.shared())
            )
            self.namespaced[name] = found
        return found

    def metric_queue(self, queue: str) -> str:
        """The ``queue`` label of this namespace's queue in the API's metrics: its name in
        ``default``, ``<namespace>/<name>`` in any other (a name no queue can have), so two
        tenants' queues of one name never share a series."""
        namespace = self.settings.namespace
        return queue if namespace == DEFAULT_NAMESPACE else f"{namespace}/{queue}"

    def shared(self) -> SharedParts:
        """What every namespace's state is built on."""
        return SharedParts(self.stream_client, self.tree_client, self.memory, self.directory)

    def forget_namespace(self, name: str) -> None:
        """Drop a deleted namespace's state; its feeds and drivers stop in the background."""
        gone = self.namespaced.pop(name, None)
        if gone is not None:
            self.detach(asyncio.ensure_future(gone.close_own()))

    async def close_own(self) -> None:
        """Stop this namespace's drivers and feeds."""
        await self.retries.close()
        await self.activity.close()
        await self.hub.close()

    async def close(self) -> None:
        """Stop every namespace's drivers and feeds (the clients are the lifespan's)."""
        for state in [self, *self.namespaced.values()]:
            await state.close_own()

    @property
    def flow(self) -> FlowStore:
        """Limits, slots and priorities of the queues (a thin store on the same client)."""
        return FlowStore(
            self.client,
            scripts=self.scripts,
            prefix=self.settings.data_prefix,
            events_maxlen=self.settings.events_maxlen,
        )

    @property
    def tree(self) -> TreeStore:
        """Reads of run families on the requests' pool: children pages."""
        return TreeStore(self.store.ctx)

    def detach(self, task: asyncio.Task[object]) -> None:
        """Keep a reference to a background task until it is done."""
        self.background.add(task)
        task.add_done_callback(self.background.discard)


@dataclass(frozen=True)
class SharedParts:
    """What a namespace's members are built on besides the request client and scripts."""

    stream_client: AsyncRedis
    tree_client: AsyncRedis
    memory: MemoryAdmission
    directory: NamespaceDirectory


def namespace_members(
    settings: Settings, client: AsyncRedis, scripts: Scripts, shared: SharedParts
) -> dict[str, Any]:
    """The members of :class:`ApiState` that belong to ``settings.namespace``: its stores
    on its key prefix, its feeds, its bulk-retry drivers, its quota guard."""
    from app.api.operations import RetryDrivers  # it imports the routes' problems

    namespace = settings.namespace
    store = RunStore.for_settings(client, scripts, settings)
    queues = QueueStore.for_settings(client, scripts, settings)
    rate_limits = RateLimitStore(
        client, scripts=scripts, prefix=settings.data_prefix, max_keys=settings.max_rate_limits
    )
    directory = shared.directory
    quota = QuotaGuard(
        namespace,
        quotas=lambda: directory.quotas(namespace),
        measure=lambda runs, stored: directory.store.held(
            namespace, queues, runs=runs, stored=stored
        ),
        buckets=rate_limits,
        usage_ttl_s=settings.quota_usage_ttl_s,
    )
    return {
        "settings": settings,
        "store": store,
        "hub": EventHub(
            RunStore.for_settings(shared.stream_client, scripts, settings),
            block_ms=settings.sse_block_ms,
            queue_max=settings.sse_queue_max,
        ),
        "activity": ActivityHub(
            ActivityStore(shared.stream_client, prefix=settings.data_prefix),
            block_ms=settings.sse_block_ms,
            queue_max=settings.sse_queue_max,
            max_queues=settings.activity_max_followed_queues,
        ),
        "queues": queues,
        "rate_limits": rate_limits,
        "tree_streams": TreeStore(StoreContext.for_settings(shared.tree_client, scripts, settings)),
        "quota": quota,
        "retries": RetryDrivers.for_settings(store, settings, shared.memory, quota),
    }


def new_memory_admission(client: AsyncRedis, settings: Settings) -> MemoryAdmission:
    """The memory mark every namespace's creates are judged against."""
    return MemoryAdmission(
        client,
        high_water=settings.memory_high_water,
        interval_s=settings.memory_check_interval_s,
        on_refused=CREATES_REFUSED.inc,
    )


def api_state(request: Request) -> ApiState:
    """FastAPI dependency: the :class:`ApiState` of the request's namespace."""
    base: ApiState = request.app.state.leasehold
    namespace = request.scope.get("state", {}).get("namespace")
    return base if namespace is None else base.for_namespace(namespace)


async def state_dependency(request: Request) -> ApiState:
    """:func:`api_state` as a route's dependency: FastAPI awaits an ``async def`` one in
    the request's own task, where a plain function is called in its thread pool (a
    thread hop, two loop wake-ups, on every request's path)."""
    return api_state(request)
