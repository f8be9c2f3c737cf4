"""How an API process is served: uvicorn, with every connection bounded.

uvicorn alone accepts any number of sockets and waits forever for a request's
headers (its keep-alive timeout only starts after a first response), so a
client holding a few hundred half-sent requests keeps them all open. Here:

* ``LEASEHOLD_API_MAX_CONNECTIONS`` is uvicorn's ``limit_concurrency``: past it
  a request gets 503 problem+json with ``Retry-After`` (uvicorn's own answer is
  a bare text/plain 503) and its connection is closed;
* ``LEASEHOLD_API_HEADER_TIMEOUT_S`` bounds the time from a connection's
  opening, or a request's first byte, to the end of its headers: past it the
  connection is closed (like nginx's ``client_header_timeout``);
* ``LEASEHOLD_API_KEEP_ALIVE_S`` is uvicorn's ``timeout_keep_alive``.

Each request's uvicorn cycle is also put in its ASGI scope, so that event
streams can write pre-encoded live frames to the socket directly
(:mod:`app.api.fanout`), with a :class:`~app.api.fanout.CloseHook` the protocol
fires when the connection is lost or the server shuts down: an event stream
(:mod:`app.api.eventstream`) then needs no task of its own to notice either.

Every command that starts uvicorn (``leasehold api``, and ``leasehold up``
through it) takes its options from :func:`uvicorn_options`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.fanout import CLOSE_EXTENSION, CYCLE_EXTENSION, CloseHook
from app.settings import Settings

BUSY_RETRY_AFTER_S = 1
_BUSY_BODY = json.dumps(
    {
        "type": "https://leasehold.dev/problems/too-many-connections",
        "title": "Too many connections",
        "status": 503,
        "detail": "this API process is at LEASEHOLD_API_MAX_CONNECTIONS; retry shortly",
    }
).encode()


async def too_many_connections(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI app a request over the connection limit gets: 503 problem+json, then close."""
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(_BUSY_BODY)).encode()),
                (b"retry-after", str(BUSY_RETRY_AFTER_S).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _BUSY_BODY, "more_body": False})


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a problem+json 503 at the limit."""

    header_timeout_s: ClassVar[float] = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Accept the connection; its first request's headers are due within the deadline."""
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._close_hook: CloseHook | None = None
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the deadline with the connection; an event stream on it ends."""
        self._disarm_header_deadline()
        super().connection_lost(exc)
        if self._close_hook is not None:
            self._close_hook.fire("disconnect")

    def shutdown(self) -> None:
        """The server stops: an event stream on this connection ends its body (then it closes)."""
        cycle = self.cycle
        if self._close_hook is not None and cycle is not None and not cycle.response_complete:
            self._close_hook.fire("shutdown")
        super().shutdown()

    def on_message_begin(self) -> None:
        """A request's first byte: its headers are due within the deadline."""
        super().on_message_begin()
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        """Headers in: no deadline; over the limit, the request gets our 503, not uvicorn's."""
        self._disarm_header_deadline()
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            # uvicorn picks its text/plain 503 app on this same test: make it pick ours
            app, self.app = self.app, too_many_connections
            self.limit_concurrency = None
            try:
                super().on_headers_complete()
            finally:
                self.app, self.limit_concurrency = app, limit
            return
        super().on_headers_complete()
        self._expose_cycle()

    def _expose_cycle(self) -> None:
        """Put the request's cycle and close hook in its scope, for event streams.

        Its ASGI task starts at the next turn of the loop, after this.
        """
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            self._close_hook = hook = CloseHook()
            extensions = self.scope.setdefault("extensions", {})
            extensions[CYCLE_EXTENSION] = cycle  # type: ignore[assignment]
            extensions[CLOSE_EXTENSION] = hook  # type: ignore[assignment]

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm_header_deadline(self) -> None:
        deadline = getattr(self, "_header_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for ``settings``."""
    protocol = type(
        "BoundedHttpProtocol",
        (BoundedHttpProtocol,),
        {"header_timeout_s": settings.api_header_timeout_s},
    )
    return {
        "http": protocol,
        "limit_concurrency": settings.api_max_connections,
        "timeout_keep_alive": settings.api_keep_alive_s,
    }
