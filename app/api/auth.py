"""Bearer-key authentication for every route but ``/healthz``.

A pure ASGI middleware rather than a FastAPI dependency, so it also covers what
no dependency sees: streaming responses (SSE), ``/openapi.json``,
unknown paths, and routes other modules add later. It runs before the body is
read, so an unauthenticated client cannot make the API parse anything.

``LEASEHOLD_API_KEYS`` holds one or more keys (several, so a key can be rotated
without downtime), compared in constant time by :mod:`app.keys` (which a
worker's metrics port uses too). They are ``admin``. Keys made through ``POST /keys``
hold one role each and are resolved by :class:`app.api.keyring.Keyring`; after
authenticating, the middleware finds the route the router will pick and checks the
role it declares in :data:`app.api.scopes.SCOPES`: too low a role is a 403 naming
the role needed. Calls of ``operate``/``admin`` routes go to the audit stream with
their status. With no ``LEASEHOLD_API_KEYS`` there is no authentication at all (and
stored keys are ignored).

``/healthz`` stays open because orchestrators probe it without credentials and it
reveals nothing (it never touches Redis). ``/readyz`` is protected like the rest:
deploy/ probes it with ``leasehold probe api``, which sends a configured key.

The console's static files (``/``, ``/console``, ``/console/assets/...``) are open too:
a browser must load the page before it can ask a person for a key. They are the
same for everyone and hold no data; every call the page then makes needs the key.
So are ``/docs`` and Swagger UI's files under ``/docs/assets/`` (app/api/routes/docs.py),
for the same reason: the page asks for the key before it fetches ``/openapi.json``.
``/.well-known/jwks.json`` is open: it publishes public keys only, for token verifiers.

One other credential is accepted, on one route: a browser stream token as
``?access_token=`` on ``GET /runs/{id}/events`` for that run (app/api/stream_tokens.py),
checked here because this middleware runs before routing. A request that also sends
an ``Authorization`` header is judged by the header alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.keyring import BOOTSTRAP
from app.api.problems import problem, store_outage
from app.api.scopes import AUDITED, cluster_only, role_for
from app.api.stream_tokens import access_token, check_stream_token
from app.keys import bearer_credentials, key_digest, key_matches
from app.models.keys import Role
from app.store.apikeys.store import StoredKey
from app.store.audit.store import AuditRecord
from app.telemetry.metrics import AUDIT_APPEND_FAILURES, AUTH_REFUSALS
from app.tokens.verify import TokenExpired, TokenRefused

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/", "/console", "/docs", "/.well-known/jwks.json"})
# the console's and Swagger UI's static assets (app/api/routes/console.py, docs.py)
OPEN_PREFIXES = ("/console/assets/", "/docs/assets/")
REALM = 'Bearer realm="leasehold"'
WS_POLICY_VIOLATION = 1008
CLIENT_KEY_HINT = "the leasehold CLI sends LEASEHOLD_API_KEY (or --api-key)"


def bearer_token(scope: Scope) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            return bearer_credentials(value)
    return None


class BearerAuth:
    """Pure ASGI middleware: 401 problem+json with ``WWW-Authenticate`` unless the key is known.

    Does nothing when no keys are configured. Lifespan and paths in
    :data:`OPEN_PATHS` pass through untouched.
    """

    def __init__(
        self, app: ASGIApp, *, keys: Iterable[str], open_paths: frozenset[str] = OPEN_PATHS
    ) -> None:
        self.app = app
        self.key_digests = [key_digest(key.encode()) for key in keys]
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let the request through, or answer 401/403 without calling the app."""
        if (
            not self.key_digests
            or scope["type"] not in ("http", "websocket")
            or scope["path"] in self.open_paths
            or scope["path"].startswith(OPEN_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        try:
            holder = await self._holder(scope, token)
        except (RedisError, OSError):
            await store_outage("the key")(scope, receive, send)
            return
        if holder is None:
            stream_token = access_token(scope) if token is None else None
            if stream_token is not None:
                await self._stream(stream_token, scope, receive, send)
            else:
                await self._reject(scope, receive, send, presented=token is not None)
            return
        needed = role_for(scope.get("method", "GET"), scope["path"])
        state = scope.setdefault("state", {})
        state["key"] = holder
        if holder.namespace is not None:
            state["bound_namespace"] = holder.namespace
            if cluster_only(scope.get("method", "GET"), scope["path"]):
                await _forbidden(
                    scope, receive, send, holder=holder, needed=needed, across_namespaces=True
                )
                return
        if needed.rank < AUDITED.rank:
            if holder.role.allows(needed):
                await self.app(scope, receive, send)
            else:
                await _forbidden(scope, receive, send, holder=holder, needed=needed)
            return
        await self._audited(scope, receive, send, holder=holder, needed=needed)

    async def _holder(self, scope: Scope, token: bytes | None) -> StoredKey | None:
        """Who the token belongs to: a bootstrap key (admin), a stored key, or nobody."""
        if token is None:
            return None
        if key_matches(token, self.key_digests):
            return BOOTSTRAP
        state = getattr(getattr(scope.get("app"), "state", None), "leasehold", None)
        if state is None:
            return None
        found: StoredKey | None = await state.keyring.resolve(token)
        return found

    async def _audited(
        self, scope: Scope, receive: Receive, send: Send, *, holder: StoredKey, needed: Role
    ) -> None:
        """Serve (or refuse) an operate/admin call, then append it to the audit stream."""
        status = [500]

        async def send_noting_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if holder.role.allows(needed):
                await self.app(scope, receive, send_noting_status)
            else:
                await _forbidden(scope, receive, send_noting_status, holder=holder, needed=needed)
        finally:
            await _audit(scope, holder, status[0])

    async def _stream(self, token: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A browser stream token on the SSE route: through if it reads this run, else 401."""
        try:
            # the lifespan's state: the signing room the tokens were issued by
            namespace = await check_stream_token(token, scope, scope["app"].state.leasehold.signing)
        except TokenRefused as refused:
            await self._reject(
                scope,
                receive,
                send,
                presented=True,
                detail=refused.reason,
                expired=isinstance(refused, TokenExpired),
            )
            return
        except (RedisError, OSError):
            await store_outage("the stream token's signing keys")(scope, receive, send)
            return
        # the token reads one run of the namespace it was issued in, and nothing else
        scope.setdefault("state", {})["bound_namespace"] = namespace
        await self.app(scope, receive, send)

    async def _reject(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        presented: bool,
        detail: str | None = None,
        expired: bool = False,
    ) -> None:
        AUTH_REFUSALS.labels("expired" if expired else "unknown_key").inc()
        if scope["type"] == "websocket":
            # closing before accept makes the server answer the handshake with 403
            await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})
            return
        # RFC 6750: no error code when no credentials were sent, invalid_token otherwise
        challenge = f'{REALM}, error="invalid_token"' if presented else REALM
        # name what a CLI user sets: the header alone left them guessing (issue 18)
        detail = detail or (
            f"the bearer key is not valid; {CLIENT_KEY_HINT}"
            if presented
            else f"this API requires an 'Authorization: Bearer <key>' header; {CLIENT_KEY_HINT}"
        )
        response = problem(
            401,
            "Unauthorized",
            detail,
            kind="unauthorized",
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)


async def _forbidden(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    holder: StoredKey,
    needed: Role,
    across_namespaces: bool = False,
) -> None:
    """403 naming what the key lacks: the route's role, or (``across_namespaces``) a
    reach beyond the one namespace it is bound to."""
    AUTH_REFUSALS.labels("role").inc()
    if across_namespaces:
        detail = (
            f"this route shows every namespace; the key {holder.name!r} reaches namespace "
            f"{holder.namespace!r} only: call it with a key bound to no namespace"
        )
        extensions = {"required_role": needed.value, "required_namespace": None}
    else:
        detail = (
            f"this route needs a key with the {needed.value!r} role (or higher); "
            f"the key {holder.name!r} has {holder.role.value!r}"
        )
        extensions = {"required_role": needed.value}
    response = problem(403, "Forbidden", detail, kind="forbidden", extensions=extensions)
    await response(scope, receive, send)


async def _audit(scope: Scope, holder: StoredKey, status: int) -> None:
    """Append the call to the audit stream; a failure is logged, never the caller's."""
    state = getattr(getattr(scope.get("app"), "state", None), "leasehold", None)
    if state is None:
        return
    client = scope.get("client")
    record = AuditRecord(
        key_id=holder.key_id,
        key_name=holder.name,
        role=holder.role,
        namespace=scope.get("state", {}).get("namespace", "-"),
        method=scope["method"],
        path=scope["path"],
        status=status,
        client=client[0] if client else "",
    )
    try:
        await state.audit.append(record)
    except (RedisError, OSError) as exc:
        AUDIT_APPEND_FAILURES.inc()
        log.warning(
            "audit entry lost (%s %s by %s): %s", record.method, record.path, record.key_id, exc
        )
