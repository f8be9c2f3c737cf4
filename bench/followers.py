"""One client process of the event-stream benchmark: K followers of one run over SSE.

Started by :mod:`bench.sse` as ``python -m bench.followers``. A follower must
cost far less than the server's side of a message, or the client is what gets
measured (the machine's cores are shared by the API, the worker, Redis and the
clients). So the default follower is a :class:`Recorder`, an ``asyncio.Protocol``
on uvloop whose ``data_received`` only keeps each read and its receive time
(``time.time()``, before anything else): no decoding while events arrive. Once
every follower has its terminal event, the reads are replayed through chunked
transfer decoding and SSE parsing (:func:`parse_reads`), each message timed by
the read that completed it. The garbage collector is off while followers are
held (nothing they keep is cyclic), so no collection pauses the client mid-run.
``--client httpx`` follows with ``httpx`` streams and the same parser, parsing as
it goes, to cross-check; it costs several times more CPU per message.

* ``tick`` events carry their emit time ``t``: the follower keeps
  ``receive - t`` per event and checks the ``seq`` numbers arrive complete and
  in order.
* ``token`` events carry their index ``i``: the follower keeps the receive
  times of the first and last token and checks every index once, in order.

A follower does not resume: a dropped stream is reported, not hidden. The
result (one JSON object) goes to ``--out``, with the process's CPU over its life
(``cpu_s``), from the last follower attached to the last terminal event
(``live_cpu_s``: what receiving the events cost) and to parse (``parse_cpu_s``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import uvloop

from app.models import TERMINAL_EVENT_TYPES

SEP = b"\r\n\r\n"  # sse-starlette's default line separator, doubled: end of a message
CRLF = b"\r\n"
OK = b"HTTP/1.1 200"
BODY_END = b"\r\n0\r\n\r\n"  # a chunked body's last (empty) chunk, after the one before
CONNECT_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 300.0


class SseParser:
    """Incremental SSE parser returning ``(event type, data bytes)`` per complete message."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        """Messages completed by ``chunk``; comments and fields other than event/data skipped."""
        self._buffer += chunk
        *blocks, self._buffer = self._buffer.split(SEP)
        messages = []
        for block in blocks:
            event_type, data = "message", None
            for line in block.split(b"\r\n"):
                if line.startswith(b"event: "):
                    event_type = line[7:].decode()
                elif line.startswith(b"data: "):
                    data = line[6:]
            if data is not None:
                messages.append((event_type, data))
        return messages


@dataclass
class Follower:
    """What one follower saw."""

    received: int = 0  # tick or token events
    in_order: bool = True  # every seq/index once, ascending, jumping only after a gap notice
    gaps: int = 0  # replay_unavailable notices: events trimmed before the API read them
    next_index: int = 0
    after_gap: bool = False  # a notice came: the next index may jump ahead
    terminal: str | None = None  # the terminal event type, None if the stream ended without it
    first_at: float | None = None  # receive time of the first tick/token (epoch s)
    last_at: float | None = None
    error: str | None = None
    latencies_s: list[float] = field(default_factory=list)

    def take(self, event_type: str, data: bytes, now: float) -> None:
        """Account for one message received at ``now``."""
        if event_type in TERMINAL_EVENT_TYPES:
            self.terminal = event_type
            return
        if event_type == "replay_unavailable":
            self.gaps += 1
            self.after_gap = True
            return
        if event_type not in ("tick", "token"):
            return
        payload = json.loads(data)["data"]
        index = payload["seq"] if event_type == "tick" else payload["i"]
        expected = index >= self.next_index if self.after_gap else index == self.next_index
        self.in_order = self.in_order and expected
        self.next_index, self.after_gap = index + 1, False
        self.received += 1
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        if event_type == "tick":
            self.latencies_s.append(now - payload["t"])


class Dechunker:
    """Incremental HTTP/1.1 response reader: headers, then chunked body pieces.

    Raises ValueError for anything but a 200 with ``Transfer-Encoding: chunked``
    (what uvicorn sends for a stream).
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._in_body = False
        self.finished = False  # the zero-size last chunk was read

    def feed(self, data: bytes) -> list[bytes]:
        """Body bytes completed by ``data``."""
        self._buffer += data
        if not self._in_body:
            head, found, rest = self._buffer.partition(SEP)
            if not found:
                return []
            if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
                raise ValueError(head.split(CRLF, 1)[0].decode(errors="replace"))
            self._in_body, self._buffer = True, rest
        return self._chunks()

    def _chunks(self) -> list[bytes]:
        pieces = []
        while (end := self._buffer.find(CRLF)) >= 0:
            size = int(self._buffer[:end], 16)
            if size == 0:
                self.finished = True
                break
            if len(self._buffer) < end + 2 + size + 2:
                break
            pieces.append(self._buffer[end + 2 : end + 2 + size])
            self._buffer = self._buffer[end + 2 + size + 2 :]
        return pieces


class Recorder(asyncio.Protocol):
    """One follower on its own connection: sends the GET, keeps every read with its time.

    Nothing is decoded while events arrive (:func:`parse_reads` does it after the
    run): per read, one clock reading, two list appends and a look at the last
    bytes for the body's end. ``attached`` is set by the first read (the response
    has begun), ``done`` once the body's last chunk came or the connection ended.
    """

    def __init__(
        self, request: bytes, done: asyncio.Future[None], attached: asyncio.Future[None]
    ) -> None:
        self._request = request
        self._done = done
        self._attached = attached
        self._transport: asyncio.Transport | None = None
        self._tail = b""
        self.times: list[float] = []  # receive time of each read, epoch s
        self.reads: list[bytes] = []
        self.error: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self.times.append(time.time())
        self.reads.append(data)
        if not self._attached.done():
            self._attached.set_result(None)  # the replay came: the next may connect
            if not data.startswith(OK):
                self._finish()  # parse_reads says what came instead
                return
        tail = data[-len(BODY_END) :] if len(data) >= len(BODY_END) else self._tail + data
        self._tail = tail[-len(BODY_END) :]
        if self._tail == BODY_END:
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.error = f"{type(exc).__name__}: {exc}"
        self._finish()

    def _finish(self) -> None:
        if not self._attached.done():
            self._attached.set_result(None)
        if not self._done.done():
            self._done.set_result(None)
        if self._transport is not None:
            self._transport.close()


def parse_reads(times: list[float], reads: list[bytes], error: str | None = None) -> Follower:
    """What a follower saw, from its reads: each message timed by the read that completed it.

    ``error`` (the connection's, if it broke) is kept unless the terminal event came first.
    """
    seen, http, sse = Follower(), Dechunker(), SseParser()
    try:
        for now, data in zip(times, reads, strict=True):
            for piece in http.feed(data):
                for event_type, payload in sse.feed(piece):
                    seen.take(event_type, payload, now)
    except ValueError as exc:
        seen.error = f"bad response: {exc}"
    if seen.error is None and seen.terminal is None:
        seen.error = error or ("stream ended without its terminal event" if reads else "no reply")
    return seen


class Milestones:
    """This process's CPU when the last follower attached and when the last one finished."""

    def __init__(self, count: int) -> None:
        self._attaching = self._running = count
        self.attached_cpu_s: float | None = None
        self.done_cpu_s: float | None = None

    def attached(self) -> None:
        """One more follower's response began."""
        self._attaching -= 1
        if self._attaching == 0:
            self.attached_cpu_s = time.process_time()

    def done(self) -> None:
        """One more follower finished."""
        self._running -= 1
        if self._running == 0:
            self.done_cpu_s = time.process_time()


async def follow_raw(
    url: str, run_id: str, attaching: asyncio.Semaphore, milestones: Milestones
) -> Recorder | str:
    """Follow one run with a :class:`Recorder` until its body ends; its reads, or what failed.

    ``attaching`` bounds the followers between connecting and their replay's
    arrival: a thousand replays at once would only measure the API's Redis pool.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (
        f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    attached: asyncio.Future[None] = loop.create_future()
    recorder = Recorder(request, done, attached)
    try:
        async with attaching:
            await asyncio.wait_for(
                loop.create_connection(lambda: recorder, host, port), CONNECT_TIMEOUT_S
            )
            await asyncio.wait_for(attached, CONNECT_TIMEOUT_S)
        milestones.attached()
        await asyncio.wait_for(done, READ_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        milestones.done()
    return recorder


async def follow_httpx(http: httpx.AsyncClient, run_id: str) -> Follower:
    """Follow one run over an httpx stream, until its terminal event or the end."""
    seen = Follower()
    parser = SseParser()
    try:
        async with http.stream("GET", f"/runs/{run_id}/events") as response:
            response.raise_for_status()
            async for chunk in response.aiter_raw():
                now = time.time()
                for event_type, data in parser.feed(chunk):
                    seen.take(event_type, data, now)
                if seen.terminal is not None:
                    break
    except httpx.HTTPError as exc:
        seen.error = f"{type(exc).__name__}: {exc}"
    return seen


async def follow_all(
    url: str, run_id: str, count: int, client: str, attach_concurrency: int = 50
) -> dict[str, Any]:
    """``count`` concurrent followers of one run; their findings and this process's CPU."""
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    live: dict[str, float | None] = {"live_cpu_s": None, "parse_cpu_s": None}
    if client == "httpx":
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
            followers = await asyncio.gather(*(follow_httpx(http, run_id) for _ in range(count)))
    else:
        attaching, milestones = asyncio.Semaphore(attach_concurrency), Milestones(count)
        gc.disable()  # a follower keeps bytes and floats: no cycles to collect mid-run
        try:
            got = await asyncio.gather(
                *(follow_raw(url, run_id, attaching, milestones) for _ in range(count))
            )
        finally:
            gc.enable()
        parse_start = time.process_time()
        followers = [
            Follower(error=item)
            if isinstance(item, str)
            else parse_reads(item.times, item.reads, item.error)
            for item in got
        ]
        if milestones.attached_cpu_s is not None and milestones.done_cpu_s is not None:
            live["live_cpu_s"] = milestones.done_cpu_s - milestones.attached_cpu_s
        live["parse_cpu_s"] = time.process_time() - parse_start
    return {
        "followers": [asdict(seen) for seen in followers],
        "cpu_s": time.process_time() - cpu_start,
        "wall_s": time.perf_counter() - wall_start,
        **live,
    }


def main(argv: list[str] | None = None) -> None:
    """Follow, then write the findings as JSON to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m bench.followers", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--client", choices=["protocol", "httpx"], default="protocol")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--attach-concurrency", type=int, default=50, help="followers connecting at once"
    )
    args = parser.parse_args(argv)
    # uvloop, as the API uses: the followers share the machine's cores with the API, so
    # what they spend per message is taken from what is being measured
    result = uvloop.run(
        follow_all(args.url, args.run, args.count, args.client, args.attach_concurrency)
    )
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
