"""Which namespace a request addresses, and whether it exists: before any route runs.

A request addresses the namespace its key is bound to; an unbound key (the bootstrap
keys, an ``admin`` key, any key made without a namespace) or no key at all (keys off)
names one with the ``Leasehold-Namespace`` header, else it addresses
LEASEHOLD_NAMESPACE (``default``). A browser stream token addresses the namespace it
was issued in. The answer goes to ``scope["state"]["namespace"]``, where
:func:`app.api.state.api_state` builds the routes' stores on that namespace's prefix.

A namespace that does not exist, or that a bound key names besides its own, is a 404
``namespace-not-found``: the same answer both ways, so a tenant learns nothing of
another's names. Everything below a namespace is then isolated by its key space
(:mod:`app.namespaces`): another tenant's run id is a 404 because this tenant's store
cannot find it, not because a route remembered to check.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import cast

from cachetools import TTLCache
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import problem, quota_problem, store_outage
from app.api.quotas import QUOTED_ROUTES
from app.api.scopes import route_of
from app.errors import QuotaExceeded
from app.models.namespaces import Quotas
from app.namespaces import DEFAULT_NAMESPACE, NAMESPACE_HEADER, NAMESPACE_PATTERN
from app.store.namespaces.store import NamespaceRecord, NamespaceStore

_HEADER = NAMESPACE_HEADER.lower().encode()
_MISSING = object()
_NAME = re.compile(NAMESPACE_PATTERN)
# a namespace name is at most 32 characters; a longer header is no namespace
_HEADER_MAX = 64


class NamespaceDirectory:
    """The namespaces one API process knows, each record trusted for ``ttl_s``."""

    def __init__(
        self,
        store: NamespaceStore,
        *,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._cache: TTLCache[str, NamespaceRecord | None] | None = (
            TTLCache(max_entries, ttl_s, timer=clock) if ttl_s > 0 else None
        )

    async def find(self, name: str) -> NamespaceRecord | None:
        """The namespace's record, or None when it does not exist (RedisError on a miss
        while Redis is unreachable)."""
        if self._cache is not None:
            # one read: ``in`` then ``[]`` can straddle the entry's expiry (KeyError)
            cached = self._cache.get(name, _MISSING)
            if cached is not _MISSING:
                return cast(NamespaceRecord | None, cached)
        found = await self.store.get(name)
        if self._cache is not None:
            self._cache[name] = found
        return found

    async def quotas(self, name: str) -> Quotas:
        """The namespace's quotas (none for one deleted meanwhile: its requests end)."""
        record = await self.find(name)
        return record.quotas if record is not None else Quotas()

    def forget(self, name: str) -> None:
        """This process changed the namespace: read it again next time."""
        if self._cache is not None:
            self._cache.pop(name, None)


def named_namespace(scope: Scope) -> str | None:
    """The ``Leasehold-Namespace`` header's value, or None when there is none."""
    for name, value in scope.get("headers") or []:
        if name == _HEADER:
            text: str = value[:_HEADER_MAX].decode("latin-1").strip()
            return text
    return None


class NamespaceScope:
    """Pure ASGI middleware (inside the authentication): resolve the request's namespace.

    ``default_namespace`` is LEASEHOLD_NAMESPACE; ``open_paths``/``open_prefixes`` are
    what needs no namespace (health, the console's files, the JWKS).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        default_namespace: str,
        open_paths: frozenset[str],
        open_prefixes: tuple[str, ...],
    ) -> None:
        self.app = app
        self.default_namespace = default_namespace
        self.open_paths = open_paths
        self.open_prefixes = open_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Set ``scope["state"]["namespace"]`` and go on, or answer 404."""
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in self.open_paths
            or scope["path"].startswith(self.open_prefixes)
        ):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        bound: str | None = state.get("bound_namespace")
        named = named_namespace(scope)
        namespace = named or bound or self.default_namespace
        try:
            reachable = (bound is None or namespace == bound) and await self._exists(
                scope, namespace
            )
        except (RedisError, OSError):
            await store_outage("the namespace")(scope, receive, send)
            return
        if not reachable:
            await _not_found(namespace, scope, receive, send)
            return
        state["namespace"] = namespace
        refusal = _remembered_refusal(scope, namespace)
        if refusal is not None:
            await quota_problem(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _exists(self, scope: Scope, namespace: str) -> bool:
        if namespace == DEFAULT_NAMESPACE:
            return True
        if not _NAME.fullmatch(namespace):
            return False  # no such name can exist: no Redis read for it
        leasehold = getattr(getattr(scope.get("app"), "state", None), "leasehold", None)
        if leasehold is None:  # before the lifespan ran: nothing is served anyway
            return False
        return await leasehold.directory.find(namespace) is not None


def _remembered_refusal(scope: Scope, namespace: str) -> QuotaExceeded | None:
    """The 429 a create or signal of a namespace past its quota gets before it is read."""
    if scope.get("method") != "POST":
        return None  # every quoted route is a POST: no route match for the rest
    route = route_of("POST", scope["path"])
    kind = QUOTED_ROUTES.get(route) if route is not None else None
    if kind is None:
        return None
    leasehold = scope["app"].state.leasehold
    refusal: QuotaExceeded | None = leasehold.for_namespace(namespace).quota.refusing(kind)
    return refusal


async def _not_found(namespace: str, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    response = problem(
        404,
        "Namespace not found",
        f"no namespace {namespace[:40]!r} is reachable with these credentials",
        kind="namespace-not-found",
    )
    await response(scope, receive, send)
