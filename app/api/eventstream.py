"""The SSE response of every event stream: one task per follower, keep-alives from one timer.

sse-starlette's ``EventSourceResponse`` runs four tasks per response in an anyio
task group (the stream, a keep-alive loop, a disconnect listener, a shutdown
listener), each with its cancel scopes, events and a lock: two thirds of the
~56 KiB an idle follower cost (issue 19: 10,000 idle followers held 624 MiB).
Under uvicorn (:mod:`app.api.server`) this response needs none of them:

* the body is sent by the request's own task (the one uvicorn already runs),
  each send bounded by ``LEASEHOLD_SSE_SEND_TIMEOUT_S``;
* keep-alive comments come from ONE timer per process and interval
  (:class:`KeepAlive`), encoded once per tick and written to each due stream's
  socket (:class:`~app.api.fanout.DirectSink`: the same write-buffer and
  send-timeout drops as live frames, so a follower that takes nothing, events
  or not, is dropped after the timeout);
* the connection's loss and the server's shutdown come from the protocol
  (:class:`~app.api.fanout.CloseHook`): the request's task is cancelled where it
  waits, so the stream's ``finally`` runs at once (unsubscribe, slot back,
  ``cancel_on_disconnect``), and at shutdown the body is ended cleanly.

Anything else (another ASGI server, an in-process transport, an HTTP/1.0 client
that gets no chunked body) is served with one extra task that listens for the
disconnect and sends the keep-alives through ASGI. The stream's slot
(:class:`~app.api.admission.StreamSlots`) is given back when the response ends,
however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import deque
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from sse_starlette import ServerSentEvent
from sse_starlette.event import ensure_bytes
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.admission import StreamSlots
from app.api.fanout import CLOSE_EXTENSION, CloseHook, DirectSink, direct_sink
from app.api.frames import chunked

log = logging.getLogger(__name__)

SEPARATOR = "\r\n"  # sse-starlette's default: what every pre-encoded frame uses
# how long a closing stream's iterator may take to clean up (its finally blocks)
CLEANUP_TIMEOUT_S = 30.0
# keep-alives due within this of each other go out in one tick of the timer
TICK_S = 0.1
_END: dict[str, Any] = {"type": "http.response.body", "body": b"", "more_body": False}


def ping_message() -> bytes:
    """A keep-alive comment, as sse-starlette words it (``: ping - <time>``)."""
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=SEPARATOR).encode()


class KeepAlive:
    """Keep-alive comments for every direct stream of one loop and interval, from one timer.

    Streams join in time order and share the interval, so a FIFO of (due, stream)
    is ordered by due time: a tick pops the due ones, pings each and puts it back
    at the end. A closed stream is skipped when it comes up (at most one entry
    each). The timer runs only while a stream is held.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._due: deque[tuple[float, EventStream]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, stream: EventStream) -> None:
        """Ping ``stream`` every interval from now until it closes."""
        self._due.append((self._loop.time() + self._interval_s, stream))
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        if self._due:
            when = max(self._due[0][0], self._loop.time()) + TICK_S
            self._timer = self._loop.call_at(when, self._tick)
        else:
            self._timer = None

    def _tick(self) -> None:
        """Ping every stream that is due (one encoded comment for all of them)."""
        now = self._loop.time()
        chunk: bytes | None = None
        due = self._due
        while due and due[0][0] <= now:
            _, stream = due.popleft()
            if stream.closed:
                continue
            if chunk is None:
                chunk = chunked(ping_message())
            if stream.keep_alive(chunk):
                due.append((now + self._interval_s, stream))
        self._arm()


_keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, KeepAlive]] = (
    weakref.WeakKeyDictionary()
)


def keep_alive_for(interval_s: float) -> KeepAlive:
    """The running loop's :class:`KeepAlive` for ``interval_s`` (made on first use)."""
    loop = asyncio.get_running_loop()
    by_interval = _keepers.setdefault(loop, {})
    keeper = by_interval.get(interval_s)
    if keeper is None:
        keeper = by_interval[interval_s] = KeepAlive(loop, interval_s)
    return keeper


class EventStream(Response):
    """A ``text/event-stream`` response of ``content``'s messages, holding one stream slot.

    Build it right after :meth:`StreamSlots.take`, with nothing that can raise in
    between: the slot is given back when the response ends, for any reason.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[Any],
        *,
        slots: StreamSlots,
        ping_s: float,
        send_timeout_s: float,
        max_buffer: int,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        sink: DirectSink | None = None,
    ) -> None:
        self.body_iterator = content
        self.status_code = status_code
        self.background = None
        self.init_headers(
            {
                "Cache-Control": "no-store",
                **(headers or {}),
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
            }
        )
        self._slots: StreamSlots | None = slots
        self._ping_s = ping_s
        self._send_timeout_s = send_timeout_s
        self._max_buffer = max_buffer
        self._sink = sink
        self._task: asyncio.Task[Any] | None = None
        self._why: str | None = None  # set when the protocol ends the stream: disconnect/shutdown
        self.closed = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the stream until it ends, the client leaves, or the server shuts down."""
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            hook = scope.get("extensions", {}).get(CLOSE_EXTENSION)
            sink = self._sink or direct_sink(
                scope, max_buffer=self._max_buffer, send_timeout_s=self._send_timeout_s
            )
            if isinstance(hook, CloseHook) and sink is not None and sink.ready():
                await self._serve_direct(send, hook, sink)
            else:
                await self._serve_generic(receive, send)
        finally:
            self.closed = True
            if self._slots is not None:
                self._slots.give_back()
                self._slots = None
            await self._close_iterator()

    async def _serve_direct(self, send: Send, hook: CloseHook, sink: DirectSink) -> None:
        """Under uvicorn: this task sends the body; the protocol and one timer do the rest."""
        self._sink = sink
        task = self._task = asyncio.current_task()
        hook.callback = self._closing
        keep_alive_for(self._ping_s).add(self)
        try:
            await self._pump(send)
            await self._send(send, _END)
        except asyncio.CancelledError:
            if self._why is None or (task is not None and task.uncancel() > 0):
                raise  # not our own cancel: pass it on
            if self._why == "shutdown":  # a clean end: the client resumes by id
                with contextlib.suppress(TimeoutError):
                    await self._send(send, _END)
        except TimeoutError:
            sink.drop("send_timeout")
        finally:
            hook.callback = None

    def _closing(self, why: str) -> None:
        """The protocol's word that the connection is gone or the server stops: end now."""
        if self._why is None and self._task is not None:
            self._why = why
            self._task.cancel()

    def keep_alive(self, chunk: bytes) -> bool:
        """Write a keep-alive chunk to the socket (the timer's call); False once closed/dropped."""
        sink = self._sink
        if self.closed or sink is None or not sink.ready():
            return False
        return sink.push(chunk)

    async def _serve_generic(self, receive: Receive, send: Send) -> None:
        """Any other server: one more task listens for the disconnect and sends keep-alives."""
        lock = asyncio.Lock()
        task = self._task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.create_task(self._watch(receive, send, lock))
        try:
            await self._pump(send, lock)
            async with lock:
                await self._send(send, _END)
        except asyncio.CancelledError:
            if self._why is None or task.uncancel() > 0:
                raise
            if self._why == "send_timeout":
                raise TimeoutError("event stream keep-alive send timed out") from None
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self, receive: Receive, send: Send, lock: asyncio.Lock) -> None:
        """Wait for the disconnect, sending a keep-alive each idle interval; then end the stream."""
        while True:
            try:
                async with asyncio.timeout(self._ping_s):
                    message = await receive()
            except TimeoutError:
                ping = {"type": "http.response.body", "body": ping_message(), "more_body": True}
                try:
                    async with lock:
                        await self._send(send, ping)
                except TimeoutError:
                    self._closing("send_timeout")
                    return
                continue
            if message["type"] == "http.disconnect":
                self._closing("disconnect")
                return

    async def _pump(self, send: Send, lock: asyncio.Lock | None = None) -> None:
        """Send each of the stream's messages as one body chunk, each within the send timeout."""
        async for data in self.body_iterator:
            chunk = data if isinstance(data, bytes) else ensure_bytes(data, SEPARATOR)
            message = {"type": "http.response.body", "body": chunk, "more_body": True}
            if lock is None:
                await self._send(send, message)
            else:
                async with lock:
                    await self._send(send, message)

    async def _send(self, send: Send, message: dict[str, Any]) -> None:
        async with asyncio.timeout(self._send_timeout_s):
            await send(message)

    async def _close_iterator(self) -> None:
        """Run the stream's cleanup (its ``finally``) now, not when it is collected."""
        aclose = getattr(self.body_iterator, "aclose", None)
        if aclose is None:
            return
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT_S):
                await aclose()
        except TimeoutError:
            log.warning("event stream cleanup took over %s s", CLEANUP_TIMEOUT_S)
        except Exception:
            log.exception("event stream cleanup failed")
