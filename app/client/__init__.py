"""HTTP clients for Leasehold's API (httpx), sync and async, used by the CLI and users.

Errors come back as :class:`ApiError` carrying the problem+json body. Each API
method is one request spec (:mod:`app.client.calls`: method, path, body or query, and
the decoder of its answer) built by one function; :class:`Client`
(:mod:`app.client.sync`) and :class:`AsyncClient` (:mod:`app.client.asynchronous`) only
send specs, so the two cannot drift apart. ``events(run_id)`` follows a run over SSE
and resumes by itself with ``Last-Event-ID`` after a dropped connection or a 502/503/504
answer (:mod:`app.client.follow`), so the caller sees every event exactly once, ending
with the terminal one.
"""

from __future__ import annotations

from app.client.asynchronous import AsyncClient
from app.client.calls import DEFAULT_TIMEOUT_S
from app.client.follow import STREAM_TIMEOUT, TRANSIENT_STATUS, TREE_ENDED
from app.client.sync import Client

# ApiError lives with the other errors (a light `runs get` raises it without this package)
from app.errors import ApiError

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "STREAM_TIMEOUT",
    "TRANSIENT_STATUS",
    "TREE_ENDED",
    "ApiError",
    "AsyncClient",
    "Client",
]
