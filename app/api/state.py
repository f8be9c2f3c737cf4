"""What the API's lifespan builds once per process and every route shares."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import Request

from app.api.activity import ActivityHub
from app.api.admission import StreamSlots
from app.api.hub import EventHub
from app.api.keyring import Keyring
from app.handlers import HandlerRegistry
from app.settings import Settings
from app.store.admission import MemoryAdmission
from app.store.audit.store import AuditStore
from app.store.family.tree import TreeStore
from app.store.flow.store import FlowStore
from app.store.lua.scripts import Scripts
from app.store.queues.store import QueueStore
from app.store.ratelimits.store import RateLimitStore
from app.store.redis.connection import AsyncRedis
from app.store.runs.store import RunStore
from app.store.signing.store import SigningKeys


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
    # detached work (e.g. cancel-on-disconnect) that no request may cancel
    background: set[asyncio.Task[object]] = field(default_factory=set)

    @property
    def flow(self) -> FlowStore:
        """Limits, slots and priorities of the queues (a thin store on the same client)."""
        return FlowStore(
            self.client,
            scripts=self.scripts,
            prefix=self.settings.prefix,
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


def api_state(request: Request) -> ApiState:
    """FastAPI dependency: the process's :class:`ApiState`."""
    state: ApiState = request.app.state.leasehold
    return state


async def state_dependency(request: Request) -> ApiState:
    """:func:`api_state` as a route's dependency: FastAPI awaits an ``async def`` one in
    the request's own task, where a plain function is called in its thread pool (a
    thread hop, two loop wake-ups, on every request's path)."""
    return api_state(request)
