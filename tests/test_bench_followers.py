"""The event-stream benchmark's client (bench.followers) reports lost, late and cut-off events.

A client that only records its reads and parses them after the run could hide a
lost or late event as easily as it could measure it: these follow a small
loopback server that sends a chunked SSE body of ``tick`` events, as the API does,
with one event missing, one late, a message split across writes, or the body cut
off, and check what the client says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from app.api.frames import chunked
from bench.followers import follow_all, parse_reads

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def message(event_type: str, data: dict[str, object], event_id: str) -> bytes:
    """An SSE message as the API frames it (``\\r\\n`` lines)."""
    body = json.dumps({"data": data})
    return f"id: {event_id}\r\nevent: {event_type}\r\ndata: {body}\r\n\r\n".encode()


def tick(seq: int, *, late_s: float = 0.0) -> bytes:
    """A ``tick`` event emitted now (or ``late_s`` ago)."""
    return message("tick", {"seq": seq, "t": time.time() - late_s}, f"1-{seq}")


def body(ticks: list[bytes], *, end: bool = True) -> list[bytes]:
    """The response's writes: headers, one chunk per tick, the terminal event, the last chunk."""
    writes = [HEAD, chunked(b"retry: 1000\r\n\r\n")] + [chunked(item) for item in ticks]
    if end:
        writes += [chunked(message("succeeded", {}, "2-0"))]
        writes += [LAST_CHUNK]
    return writes


Serve = Callable[[list[bytes]], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start loopback servers sending ``writes`` (each flushed on its own) to every request."""
    servers: list[asyncio.Server] = []

    async def start(writes: list[bytes]) -> str:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            try:
                for data in writes:
                    writer.write(data)
                    await writer.drain()
                    await asyncio.sleep(0.001)
            finally:  # after the last chunk, or cut off without the terminal event
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def followers(url: str, count: int = 2) -> list[dict[str, object]]:
    """What ``count`` followers of ``url`` saw, through the benchmark's own client."""
    found = await asyncio.wait_for(follow_all(url, "run-1", count, "protocol"), 30)
    assert found["live_cpu_s"] is not None
    followers: list[dict[str, object]] = found["followers"]
    assert len(followers) == count
    return followers


async def test_every_event_on_time_is_complete_and_in_order(serve: Serve) -> None:
    url = await serve(body([tick(seq) for seq in range(5)]))
    for seen in await followers(url):
        assert seen["received"] == 5
        assert seen["in_order"] is True
        assert seen["terminal"] == "succeeded"
        assert seen["error"] is None
        latencies = seen["latencies_s"]
        assert isinstance(latencies, list) and len(latencies) == 5
        assert max(latencies) < 5.0  # no speed claim: only that none looks late


async def test_a_lost_event_is_reported_out_of_order(serve: Serve) -> None:
    url = await serve(body([tick(0), tick(1), tick(3), tick(4)]))  # 2 never sent
    for seen in await followers(url):
        assert seen["received"] == 4
        assert seen["in_order"] is False
        assert seen["terminal"] == "succeeded"


async def test_a_late_event_shows_its_delay(serve: Serve) -> None:
    url = await serve(body([tick(0), tick(1, late_s=30.0), tick(2)]))
    for seen in await followers(url):
        latencies = seen["latencies_s"]
        assert isinstance(latencies, list) and len(latencies) == 3
        assert latencies[1] >= 30.0
        assert max(latencies[0], latencies[2]) < 30.0


async def test_a_stream_cut_off_before_its_end_is_an_error(serve: Serve) -> None:
    url = await serve(body([tick(0), tick(1)], end=False))
    for seen in await followers(url, count=1):
        assert seen["received"] == 2
        assert seen["terminal"] is None
        assert seen["error"]


def test_a_message_split_across_reads_is_timed_by_the_read_that_completed_it() -> None:
    whole = b"".join(body([tick(0)]))
    cut = whole.index(b"data: ") + 10  # inside the tick's data line
    seen = parse_reads([100.0, 200.0], [whole[:cut], whole[cut:]])
    assert seen.received == 1
    assert seen.terminal == "succeeded"
    assert seen.last_at == 200.0


def test_a_refusal_is_reported_not_parsed() -> None:
    refusal = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
    seen = parse_reads([1.0], [refusal])
    assert seen.received == 0
    assert seen.error is not None and "503" in seen.error
