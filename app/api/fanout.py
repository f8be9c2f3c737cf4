"""Live frames written straight to followers' sockets: one pre-encoded chunk, many transports.

Under uvicorn (how the API is served, :mod:`app.api.server`) a follower that has
caught up (its replay sent, its ``retry:`` hint sent, its inbox empty) stops
receiving through its own task and the ASGI layers: the feed's reader writes
each live frame's chunk (:attr:`~app.api.frames.Frame.chunk`) to the follower's
transport itself, in the same loop that offers it to every other follower. A
thousand followers of one event then cost a thousand ``transport.write`` calls
of the same bytes, not a thousand task wake-ups, each with sse-starlette's send
and its timeout scope and Starlette's send wrappers (the profile of issue 19:
45-80 µs per follower per event, so the last of 1,000 followers of a burst got
it ~50 ms after the first).

The bounds the per-follower path gives are kept:

* a follower whose socket holds more than ``LEASEHOLD_SSE_WRITE_BUFFER_MAX_BYTES``
  unsent bytes is dropped (its connection aborted): the direct counterpart of
  the bounded inbox (``LEASEHOLD_SSE_QUEUE_MAX``);
* one whose socket has taken nothing new (uvicorn's flow control paused) for
  longer than ``LEASEHOLD_SSE_SEND_TIMEOUT_S`` is dropped at its next event:
  the slow-client send timeout. Keep-alive comments are written the same way
  (:mod:`app.api.eventstream`), so it covers a follower with no events too.

A dropped follower reconnects with ``Last-Event-ID`` and loses nothing. Anything
else (another ASGI server, an in-process transport) keeps the per-follower path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol, cast

from app.telemetry.metrics import SSE_DROPPED

log = logging.getLogger(__name__)

# where app.api.server's protocol puts the request's uvicorn cycle in the ASGI scope
CYCLE_EXTENSION = "leasehold.http_cycle"
# and the request's CloseHook: how the protocol tells an event stream its connection ended
CLOSE_EXTENSION = "leasehold.on_close"


class FlowControl(Protocol):
    """uvicorn's flow control of one connection: paused while the socket's buffer is full."""

    write_paused: bool


class HttpCycle(Protocol):
    """The parts of uvicorn's ``RequestResponseCycle`` a direct write relies on."""

    transport: asyncio.Transport
    flow: FlowControl
    response_started: bool
    response_complete: bool
    disconnected: bool
    chunked_encoding: bool | None


class CloseHook:
    """The protocol's word to a request's event stream: its connection is lost, or the server stops.

    An event stream sets :attr:`callback` while it runs; ``app.api.server``'s
    protocol calls :meth:`fire` with ``"disconnect"`` or ``"shutdown"``. It replaces
    a listener task per follower (waiting on ``receive()``) and sse-starlette's
    shutdown watcher.
    """

    __slots__ = ("callback",)

    def __init__(self) -> None:
        self.callback: Callable[[str], None] | None = None

    def fire(self, why: str) -> None:
        """Tell the stream (once) why it must end, if one is listening."""
        callback, self.callback = self.callback, None
        if callback is not None:
            callback(why)


class DirectSink:
    """One follower's socket, written to below the ASGI layer, with the send bounds."""

    # see app.api.hub.Subscription: one object, not an object and its dict, per follower
    __slots__ = ("_cycle", "_flow", "_max_buffer", "_paused_since", "_send_timeout_s", "_transport")

    def __init__(self, cycle: HttpCycle, *, max_buffer: int, send_timeout_s: float) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._flow = cycle.flow
        self._max_buffer = max_buffer
        self._send_timeout_s = send_timeout_s
        self._paused_since: float | None = None

    def ready(self) -> bool:
        """Whether frames may follow: the headers are out, the body is chunked and still open."""
        cycle = self._cycle
        return (
            cycle.response_started
            and cycle.chunked_encoding is True
            and not cycle.response_complete
            and not cycle.disconnected
        )

    def push(self, chunk: bytes) -> bool:
        """Write one body chunk now; False (the follower dropped or gone) if it may not be."""
        transport = self._transport
        if transport.is_closing():
            return False
        if self._flow.write_paused:  # over the transport's high-water mark: a slow reader
            now = time.monotonic()
            if self._paused_since is None:
                self._paused_since = now
            elif now - self._paused_since > self._send_timeout_s:
                return self.drop("send_timeout")
            if transport.get_write_buffer_size() + len(chunk) > self._max_buffer:
                return self.drop("write_buffer")
        else:
            self._paused_since = None
        transport.write(chunk)
        return True

    def drop(self, why: str) -> bool:
        """Abort the connection of a follower too slow to keep: it resumes by Last-Event-ID."""
        SSE_DROPPED.labels(why).inc()
        log.info("slow event-stream follower dropped (%s)", why)
        self._transport.abort()
        return False


def direct_sink(
    scope: MutableMapping[str, Any], *, max_buffer: int, send_timeout_s: float
) -> DirectSink | None:
    """A sink for the request of ``scope`` when its server lets us write below ASGI, else None."""
    cycle = scope.get("extensions", {}).get(CYCLE_EXTENSION)
    if cycle is None:
        return None
    return DirectSink(cast(HttpCycle, cycle), max_buffer=max_buffer, send_timeout_s=send_timeout_s)
