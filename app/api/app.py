"""``create_app(settings)``: the FastAPI application factory.

The lifespan owns the Redis pool and the script registry; routes reach them
through :func:`app.api.state.api_state`. The API never talks to executors: it
writes runs to Redis and reads them back.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from redis.exceptions import RedisError

from app import __version__
from app.api.admission import StreamSlots
from app.api.auth import OPEN_PATHS, OPEN_PREFIXES, BearerAuth
from app.api.cors import install_cors
from app.api.hosts import TrustedHosts, trusted_hosts
from app.api.keyring import Keyring
from app.api.limits import BodySizeLimit
from app.api.namespaces import NamespaceDirectory, NamespaceScope
from app.api.openapi import install_openapi
from app.api.origins import CrossSiteWrites
from app.api.problems import install_problem_handlers
from app.api.routes import (
    activity,
    batch,
    builds,
    console,
    decisions,
    docs,
    events,
    family,
    flow,
    keys,
    leases,
    metrics,
    namespaces,
    queues,
    ratelimits,
    retries,
    runs,
    schedules,
    signals,
    system,
    tokens,
)
from app.api.state import ApiState, SharedParts, namespace_members, new_memory_admission
from app.handlers import HandlerRegistry, load_handler_modules
from app.settings import Settings
from app.store.apikeys.store import KeyStore
from app.store.audit.store import AuditStore
from app.store.lua.scripts import Scripts
from app.store.namespaces.store import NamespaceStore
from app.store.redis.connection import AsyncRedis, async_client
from app.store.signing.store import SigningKeys

BODY_OVERHEAD_BYTES = 16_384
# the feeds' pool: two blocking readers (run events, activity) and the feeds' short reads
STREAM_POOL_CONNECTIONS = 16
# the tree streams' pool: one round (one pipeline) each at a time; more rounds wait their turn
TREE_POOL_CONNECTIONS = 8


def create_app(settings: Settings, registry: HandlerRegistry | None = None) -> FastAPI:
    """Build the API for ``settings``; handlers come from LEASEHOLD_HANDLERS by default.

    The demo's model route is not mounted here: whoever enables the demo mounts it
    (:func:`app.demo.model_server.install`). Raises ConfigurationError when the API
    would be exposed without naming its trusted hosts.
    """
    hosts = trusted_hosts(settings)  # ConfigurationError before anything is built
    handlers = registry or load_handler_modules(settings.handlers)
    app = FastAPI(
        title="Leasehold",
        version=__version__,
        lifespan=_lifespan(settings, handlers),
        description="Durable runs on Redis with fenced leases.",
        # /docs is ours (app.api.routes.docs: no CDN, a key); ReDoc would load from a CDN
        docs_url=None,
        redoc_url=None,
    )
    install_problem_handlers(app)
    _include_routes(app)
    _add_middleware(app, settings, hosts)
    install_openapi(app, auth_enabled=bool(settings.api_keys), open_paths=OPEN_PATHS)
    return app


def _lifespan(
    settings: Settings, handlers: HandlerRegistry
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The process's life: its Redis clients, stores and feeds, built at start-up and
    closed at shutdown in the reverse order (the retries first: they use the client)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = _request_client(settings)
        scripts = Scripts.for_settings(settings)
        # if Redis is not up yet, /readyz says so and calls load scripts on demand
        with contextlib.suppress(RedisError, OSError):
            await scripts.load_all(client)
        stream_client = _stream_client(settings)
        tree_client = _tree_client(settings)
        state = _api_state(
            settings,
            handlers,
            client=client,
            stream_client=stream_client,
            tree_client=tree_client,
            scripts=scripts,
        )
        app.state.leasehold = state
        try:
            yield
        finally:
            # every namespace's bulk retries and feeds; then the clients they use
            await state.close()
            await tree_client.aclose()
            await stream_client.aclose()
            await client.aclose()

    return lifespan


def _request_client(settings: Settings) -> AsyncRedis:
    """The requests' pool. Requests never block in Redis: a silent Redis is a 503, not a
    hung request (every call is bounded by LEASEHOLD_REDIS_REQUEST_TIMEOUT_S)."""
    return async_client(
        settings.resolved_redis_url(),
        max_connections=settings.redis_max_connections,
        pool_timeout_s=settings.redis_pool_timeout_s,
        socket_timeout_s=settings.redis_request_timeout_s,
    )


def _stream_client(settings: Settings) -> AsyncRedis:
    """The feeds' own pool: one blocking XREAD per hub (per queue in a cluster) and a few
    non-blocking reads, whatever the number of streams followed."""
    return async_client(
        settings.resolved_redis_url(),
        max_connections=STREAM_POOL_CONNECTIONS,
        pool_timeout_s=settings.redis_pool_timeout_s,
    )


def _tree_client(settings: Settings) -> AsyncRedis:
    """The tree streams' pool: a round waits for a free connection rather than fail (each
    command is still bounded by LEASEHOLD_REDIS_REQUEST_TIMEOUT_S), so a crowd of tree
    streams slows itself down and never takes a request's connection."""
    return async_client(
        settings.resolved_redis_url(),
        max_connections=TREE_POOL_CONNECTIONS,
        socket_timeout_s=settings.redis_request_timeout_s,
    )


def _api_state(
    settings: Settings,
    handlers: HandlerRegistry,
    *,
    client: AsyncRedis,
    stream_client: AsyncRedis,
    tree_client: AsyncRedis,
    scripts: Scripts,
) -> ApiState:
    """What every route shares: the stores on ``client``, the feeds on ``stream_client``,
    the tree streams' rounds on ``tree_client``; this process's own namespace's members
    (others are built on their first request, :meth:`ApiState.for_namespace`).

    Builds, and connects to nothing: the clients' pools open on first use.
    """
    slots = StreamSlots(settings.sse_max_followers)
    shared = SharedParts(
        stream_client,
        tree_client,
        new_memory_admission(client, settings),
        NamespaceDirectory(
            NamespaceStore(client, prefix=settings.prefix, max_namespaces=settings.max_namespaces),
            ttl_s=settings.namespace_cache_ttl_s,
            max_entries=settings.max_namespaces + 1,
        ),
    )
    return ApiState(
        client=client,
        scripts=scripts,
        registry=handlers,
        slots=slots,
        memory=shared.memory,
        tree_slots=StreamSlots.for_trees(settings.sse_max_tree_streams, within=slots),
        keyring=Keyring(
            KeyStore(client, prefix=settings.prefix, max_keys=settings.max_api_keys),
            ttl_s=settings.key_cache_ttl_s,
            max_entries=settings.key_cache_max_entries,
        ),
        audit=AuditStore(
            client,
            prefix=settings.prefix,
            max_entries=settings.audit_max_entries,
            retention_s=settings.audit_retention_s,
        ),
        signing=SigningKeys.for_settings(client, settings),
        directory=shared.directory,
        stream_client=stream_client,
        tree_client=tree_client,
        **namespace_members(settings, client, scripts, shared),
    )


def _include_routes(app: FastAPI) -> None:
    """Mount every router, then the console and the docs pages; the order is the match order."""
    app.include_router(batch.router)  # before runs: /runs/batch is no run id
    app.include_router(retries.router)
    app.include_router(runs.router)
    app.include_router(events.router)
    app.include_router(family.router)
    app.include_router(decisions.router)
    app.include_router(signals.router)
    app.include_router(system.router)
    app.include_router(builds.router)
    app.include_router(metrics.router)
    app.include_router(activity.router)
    app.include_router(queues.router)
    app.include_router(ratelimits.router)
    app.include_router(flow.router)
    app.include_router(schedules.router)
    app.include_router(keys.router)
    app.include_router(namespaces.router)
    app.include_router(tokens.router)
    app.include_router(leases.router)
    console.install(app)
    docs.install(app)


def _add_middleware(app: FastAPI, settings: Settings, hosts: frozenset[str]) -> None:
    """The middleware stack, innermost first: each one added later runs before the others."""
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_input_bytes + BODY_OVERHEAD_BYTES)
    # added later = outermost: a request without a key is refused before its body is read,
    # and CORS preflights (which never carry a key) are answered before authentication
    # inside the authentication: which namespace the request (its key, its header) reads
    app.add_middleware(
        NamespaceScope,
        default_namespace=settings.namespace,
        open_paths=OPEN_PATHS,
        open_prefixes=OPEN_PREFIXES,
    )
    app.add_middleware(BearerAuth, keys=settings.api_keys)
    # a browser page on another site may not write, keys or not (CSRF); inside CORS so
    # that a named origin's preflight is still answered
    app.add_middleware(CrossSiteWrites, cors_origins=settings.cors_origins)
    install_cors(app, settings.cors_origins)
    # outermost: a Host nobody named (DNS rebinding) is refused before anything else runs
    app.add_middleware(TrustedHosts, hosts=hosts)
