"""Cross-site writes: a page on another site may not change state through the API.

A browser sends some cross-origin requests without asking first (no CORS
preflight): a ``no-cors`` POST with a form or text body, or with no body at
all. JSON bodies are refused unless labelled ``application/json`` (see
``bodies.py``), but ``POST /runs/{id}/cancel`` and ``resume`` need no body, so a
page the victim opens could still cancel runs of an API without keys. Every
browser labels such a request with ``Origin`` (and ``Sec-Fetch-Site``); no
server-side client does. So an unsafe method (POST, PUT, PATCH, DELETE) from an
origin that is neither the API's own nor one named in ``LEASEHOLD_CORS_ORIGINS``
is answered 403 before authentication, body parsing or Redis — the Fetch
Metadata "resource isolation" policy. Reads are left to CORS: a foreign page can
send a GET but cannot read its answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import problem
from app.settings import ENV_PREFIX

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANY_ORIGIN = "*"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return str(value.decode("latin-1")).strip()
    return None


def same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` (``scheme://host[:port]``) names the host the request was sent to."""
    if host is None:
        return False
    netloc = urlsplit(origin).netloc.lower()
    return bool(netloc) and netloc == host.lower()


def write_allowed(scope: Scope, cors_origins: Iterable[str]) -> bool:
    """False for a browser's unsafe request from a site this API did not name."""
    if scope["type"] != "http" or scope["method"] not in UNSAFE_METHODS:
        return True
    origin = _header(scope, b"origin")
    if origin is None:
        # no browser sends an unsafe cross-site request without Origin; a client that
        # sends Sec-Fetch-Site anyway is believed
        return _header(scope, b"sec-fetch-site") not in ("cross-site", "same-site")
    allowed = set(cors_origins)
    if ANY_ORIGIN in allowed or origin in allowed:
        return True
    return same_origin(origin, _header(scope, b"host"))


class CrossSiteWrites:
    """Pure ASGI middleware: 403 problem+json for a cross-site browser write."""

    def __init__(self, app: ASGIApp, *, cors_origins: Iterable[str]) -> None:
        self.app = app
        self.cors_origins = frozenset(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 403 without calling the app."""
        if write_allowed(scope, self.cors_origins):
            await self.app(scope, receive, send)
            return
        origin = _header(scope, b"origin") or "another site"
        response = problem(
            403,
            "Cross-site request refused",
            f"a page on {origin!r} may not change anything through this API; "
            f"name its origin in {ENV_PREFIX}CORS_ORIGINS to allow it",
            kind="cross-site-request",
        )
        await response(scope, receive, send)
