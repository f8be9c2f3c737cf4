"""Bearer-key authentication for every route but ``/healthz``.

A pure ASGI middleware rather than a FastAPI dependency, so it also covers what
no dependency sees: streaming responses (SSE), ``/openapi.json``,
unknown paths, and routes other modules add later. It runs before the body is
read, so an unauthenticated client cannot make the API parse anything.

``LEASEHOLD_API_KEYS`` holds one or more keys (several, so a key can be rotated
without downtime), compared in constant time by :mod:`app.keys` (which a
worker's metrics port uses too).

``/healthz`` stays open because orchestrators probe it without credentials and it
reveals nothing (it never touches Redis). ``/readyz`` is protected like the rest:
deploy/ probes it with ``leasehold probe api``, which sends a configured key.

The console's static files (``/``, ``/console``, ``/console/assets/...``) are open too:
a browser must load the page before it can ask a person for a key. They are the
same for everyone and hold no data; every call the page then makes needs the key.
So are ``/docs`` and Swagger UI's files under ``/docs/assets/`` (app/api/routes/docs.py),
for the same reason: the page asks for the key before it fetches ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import problem
from app.keys import bearer_credentials, key_digest, key_matches

OPEN_PATHS = frozenset({"/healthz", "/", "/console", "/docs"})
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
        """Let the request through, or answer 401 without calling the app."""
        if (
            not self.key_digests
            or scope["type"] not in ("http", "websocket")
            or scope["path"] in self.open_paths
            or scope["path"].startswith(OPEN_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        if token is not None and key_matches(token, self.key_digests):
            await self.app(scope, receive, send)
            return
        await self._reject(scope, receive, send, presented=token is not None)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, *, presented: bool) -> None:
        if scope["type"] == "websocket":
            # closing before accept makes the server answer the handshake with 403
            await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})
            return
        # RFC 6750: no error code when no credentials were sent, invalid_token otherwise
        challenge = f'{REALM}, error="invalid_token"' if presented else REALM
        # name what a CLI user sets: the header alone left them guessing (issue 18)
        detail = (
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
