"""A follower that stops reading is dropped, never slows the others, and resumes by id.

Caught-up followers are written to by the hub directly (app.api.fanout), below
sse-starlette; these check that the bounds it gave still hold there, against a
real uvicorn API, a real worker and real sockets: the slow follower is a raw
socket with a tiny receive buffer that reads nothing after connecting, the
other reads as fast as it can.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from app.client import AsyncClient
from app.models import RunEvent
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import Processes

TOKENS = 20_000  # ~5 MB of stream: far past a socket's buffers and the bound below
END = b"0\r\n\r\n"  # the last chunk of a chunked body


def follower_socket(url: str, run_id: str, *, receive_buffer: int | None = None) -> socket.socket:
    """A raw connection that has asked for the run's events (and read nothing yet)."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    request = f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sock.sendall(request.encode())
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until its body ends or the connection does."""
    received = bytearray()
    sock.settimeout(60)
    try:
        while chunk := sock.recv(1 << 20):
            received += chunk
            if received.endswith(END):
                break
    except ConnectionResetError:
        pass  # aborted by the server: what was read is what the client got
    finally:
        sock.close()
    return bytes(received)


def event_ids(raw: bytes) -> list[str]:
    """The ids of the complete SSE messages in a raw chunked response, in order."""
    _, _, body = raw.partition(b"\r\n\r\n")
    data = bytearray()
    while (end := body.find(b"\r\n")) > 0:
        size = int(body[:end], 16)
        if size == 0 or len(body) < end + 2 + size + 2:
            break  # the end, or a chunk cut short by the abort
        data += body[end + 2 : end + 2 + size]
        body = body[end + 2 + size + 2 :]
    *messages, _ = bytes(data).split(b"\r\n\r\n")
    ids = []
    for message in messages:
        for line in message.split(b"\r\n"):
            if line.startswith(b"id: "):
                ids.append(line[4:].decode())
    return ids


async def dropped(url: str, why: str) -> float:
    """The API's count of followers dropped as slow, for ``why``."""
    async with httpx.AsyncClient(base_url=url) as http:
        text = (await http.get("/metrics")).text
    name = f'leasehold_sse_followers_dropped_total{{why="{why}"}} '
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.removeprefix(name))
    return 0.0


async def subscribers(url: str) -> float:
    async with httpx.AsyncClient(base_url=url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("leasehold_sse_subscribers "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize(
    ("why", "env"),
    [
        # the unsent bytes pass the bound long before the send timeout
        ("write_buffer", {"LEASEHOLD_SSE_WRITE_BUFFER_MAX_BYTES": "65536"}),
        # the whole run fits the bound: the socket takes nothing for a second, and the
        # next write (a keep-alive, or the body's end) finds it so
        (
            "send_timeout",
            {
                "LEASEHOLD_SSE_WRITE_BUFFER_MAX_BYTES": "67108864",
                "LEASEHOLD_SSE_SEND_TIMEOUT_S": "1",
                "LEASEHOLD_SSE_KEEPALIVE_S": "0.5",
            },
        ),
    ],
)
async def test_a_follower_that_stops_reading_is_dropped_while_the_others_get_everything(
    processes: Processes, run_store: RunStore, why: str, env: dict[str, str]
) -> None:
    _, url = processes.api(**env)
    run = (await run_store.create(NewRun(handler="test.tokens", input={"count": TOKENS}))).run
    slow = follower_socket(url, run.id, receive_buffer=4096)
    fast = follower_socket(url, run.id)
    fast_read = asyncio.create_task(asyncio.to_thread(read_until_closed, fast))
    await eventually(lambda: subscribers(url), until=lambda n: n == 2, what="both to attach")
    processes.worker(LEASEHOLD_EVENTS_MAXLEN=str(TOKENS * 2))  # the whole run stays stored

    await eventually(lambda: dropped(url, why), until=lambda n: n == 1, what="the slow drop")
    stored = [event.id for event in await run_store.read_events(run.id, count=TOKENS + 100)]
    fast_ids = event_ids(await fast_read)
    assert fast_ids == stored  # every event once, in order, to the terminal one
    await eventually(lambda: subscribers(url), until=lambda n: n == 0, what="both to leave")

    slow_ids = event_ids(await asyncio.to_thread(read_until_closed, slow))
    assert slow_ids == stored[: len(slow_ids)]  # cut short, not the end
    assert len(slow_ids) < len(stored)
    async with AsyncClient(url) as client:  # a reconnect with Last-Event-ID misses nothing
        after = slow_ids[-1] if slow_ids else None
        rest: list[RunEvent] = [event async for event in client.events(run.id, last_event_id=after)]
    assert slow_ids + [event.id for event in rest] == stored
