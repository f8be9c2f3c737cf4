"""``leasehold gate``: a reverse proxy that lets through only callers holding a current lease.

Put it in front of any HTTP tool (a model endpoint, a payment API, an internal
service). A handler sends ``Authorization: Bearer <ctx.lease_token(audience=...)>``
(or ``Leasehold-Lease: <token>`` when the tool needs the Authorization header for
itself); the gate checks the token (:class:`~app.tokens.verify.LeaseVerifier`: the
signature against the API's JWKS, audience, expiry, and online the run's current owner
and fence, kept about a third of the token's lifetime) and forwards the request to the
upstream with the lease token removed and ``Leasehold-Run``, ``Leasehold-Owner`` and
``Leasehold-Fence`` added, so the tool can log who called. A worker that lost its lease
(paused, partitioned, taken over) is refused with 409 within one lease TTL, before its
token expires; a missing, tampered, expired or misaddressed token gets 401. Both are
``application/problem+json``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.tokens.verify import LeaseClaims, LeaseVerifier, TokenRefused

log = logging.getLogger(__name__)

LEASE_HEADER = "leasehold-lease"
# hop-by-hop headers (RFC 9110 7.6.1) and those the proxy sets itself
_DROPPED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        LEASE_HEADER,
    }
)
_TITLES = {401: "Unauthorized", 409: "Conflict", 503: "Service Unavailable"}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def lease_token_of(headers: Mapping[str, str]) -> tuple[str | None, bool]:
    """The lease token a request carries, and whether it came in ``Authorization``."""
    token = headers.get(LEASE_HEADER)
    if token:
        return token.strip(), False
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip(), True
    return None, False


def refusal(status: int, detail: str) -> JSONResponse:
    """A problem+json answer; 401 says which scheme it wants."""
    headers = {"WWW-Authenticate": 'Bearer realm="leasehold-gate"'} if status == 401 else None
    return JSONResponse(
        {
            "type": "about:blank",
            "title": _TITLES.get(status, "Refused"),
            "status": status,
            "detail": detail,
        },
        status_code=status,
        media_type="application/problem+json",
        headers=headers,
    )


def gate_app(
    *,
    upstream: str,
    verifier: LeaseVerifier,
    timeout_s: float = 60.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """The gate as an ASGI app forwarding to ``upstream`` (a base URL; ``transport``: how,
    for tests)."""
    holder: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(
            base_url=upstream, timeout=timeout_s, transport=transport
        ) as client:
            holder["client"] = client
            yield

    async def forward(request: Request) -> Response:
        token, in_authorization = lease_token_of(request.headers)
        if token is None:
            return refusal(
                401, "a lease token is required (Authorization: Bearer or Leasehold-Lease)"
            )
        try:
            claims = await asyncio.to_thread(verifier.verify, token)
        except TokenRefused as refused:
            log.info("gate refused %s %s: %s", request.method, request.url.path, refused.reason)
            return refusal(refused.status, refused.reason)
        return await _send(holder["client"], request, claims, strip_authorization=in_authorization)

    return Starlette(routes=[Route("/{path:path}", forward, methods=METHODS)], lifespan=lifespan)


async def _send(
    client: httpx.AsyncClient, request: Request, claims: LeaseClaims, *, strip_authorization: bool
) -> Response:
    headers = _upstream_headers(request.headers, claims, strip_authorization=strip_authorization)
    outgoing = client.build_request(
        request.method,
        request.url.path,
        params=request.url.query,
        headers=headers,
        content=request.stream(),
    )
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        log.warning(
            "gate could not reach the upstream for %s %s: %r", request.method, request.url.path, exc
        )
        return refusal(503, f"the upstream could not be reached: {exc!r}")
    kept = {k: v for k, v in answer.headers.items() if k.lower() not in _DROPPED}
    return StreamingResponse(
        answer.aiter_raw(),
        status_code=answer.status_code,
        headers=kept,
        background=BackgroundTask(answer.aclose),
    )


def _upstream_headers(
    headers: Mapping[str, str], claims: LeaseClaims, *, strip_authorization: bool
) -> dict[str, Any]:
    out = {
        k: v
        for k, v in headers.items()
        if k.lower() not in _DROPPED and not (strip_authorization and k.lower() == "authorization")
    }
    out["leasehold-namespace"] = claims.namespace
    out["leasehold-run"] = claims.run_id
    out["leasehold-owner"] = claims.owner_id
    out["leasehold-fence"] = str(claims.fence)
    return out
