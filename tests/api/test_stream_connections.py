"""What an event stream's connection costs and how it ends, against a real uvicorn API.

Under uvicorn an event stream runs in the request's own task, with no listener
tasks of its own (app.api.eventstream): the protocol tells it when the client
has gone or the server stops, and one timer writes every stream's keep-alives.
These check what a client and an operator see of that: a thousand followers
that leave give back every socket and slot, an idle follower gets keep-alives,
and a shutdown ends an open stream's body cleanly.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
from urllib.parse import urlsplit

import httpx
import pytest

from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import Processes

END = b"0\r\n\r\n"  # the last chunk of a chunked body
FOLLOWERS = 1000


def open_file_room(wanted: int) -> None:
    """Raise this process's open-file limit to ``wanted`` (the API it starts inherits it).

    A thousand followers need a thousand sockets on each side, and many machines
    start processes with a soft limit of 1,024; only a hard limit below it is a
    reason not to run.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the open-file hard limit ({hard}) is below the {wanted} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def gauge(url: str, name: str) -> float:
    """One unlabelled metric of the API, as /metrics shows it."""
    # the API may be busy attaching a thousand followers on a loaded machine: wait for it
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0


def connections(pid: int, port: int) -> int:
    """The connections a process holds on its listening ``port`` (its clients), from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed while listed
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local_port, state, inode = (
                    int(fields[1].rsplit(":", 1)[1], 16),
                    fields[3],
                    fields[9],
                )
                count += local_port == port and state != "0A" and inode in inodes  # 0A: LISTEN
    return count


async def connections_of(pid: int, port: int) -> int:
    """:func:`connections`, as a probe for :func:`~tests.support.polling.eventually`."""
    return connections(pid, port)


async def follow(url: str, run_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw HTTP/1.1 follower of the run's events (the request sent, nothing read yet)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def read_until(reader: asyncio.StreamReader, marker: bytes, *, count: int = 1) -> bytes:
    """What the server sends until ``marker`` has been seen ``count`` times (or it closes)."""
    received = bytearray()
    while received.count(marker) < count:
        chunk = await reader.read(65536)
        if not chunk:
            break
        received += chunk
    return bytes(received)


async def test_a_thousand_followers_that_leave_give_back_every_socket_and_slot(
    processes: Processes, run_store: RunStore
) -> None:
    open_file_room(4 * FOLLOWERS)
    api, url = processes.api(
        LEASEHOLD_SSE_MAX_FOLLOWERS=str(FOLLOWERS + 10),
        LEASEHOLD_API_MAX_CONNECTIONS=str(FOLLOWERS + 50),
    )
    run = (await run_store.create(NewRun(handler="demo.sleep", input={"seconds": 1}))).run
    port = urlsplit(url).port
    assert port is not None  # no worker below: the run stays queued, its streams open

    followers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(FOLLOWERS // 50):  # 50 at a time: attaching is not what is tested
            followers += await asyncio.gather(*(follow(url, run.id) for _ in range(50)))
        await eventually(
            lambda: gauge(url, "leasehold_sse_subscribers"),
            until=lambda n: n == FOLLOWERS,
            timeout_s=120,
            what="every follower to attach",
        )
        first = await asyncio.wait_for(read_until(followers[0][0], b"event: created"), 30)
        assert first.startswith(b"HTTP/1.1 200") and b"event: created" in first
        assert connections(api.pid, port) >= FOLLOWERS
    finally:  # the followers leave (and on a failure above, no socket outlives the test)
        for _, writer in followers:
            writer.close()
    await eventually(
        lambda: gauge(url, "leasehold_sse_subscribers"),
        until=lambda n: n == 0,
        timeout_s=60,
        what="every follower to be removed",
    )
    assert await gauge(url, "leasehold_sse_streams") == 0  # every slot given back
    await eventually(
        lambda: connections_of(api.pid, port),
        until=lambda n: n == 0,
        what="the API to close the followers' sockets",
    )
    reader, writer = await follow(url, run.id)  # and the process still serves a new one
    try:
        assert b"event: created" in await asyncio.wait_for(
            read_until(reader, b"event: created"), 30
        )
    finally:
        writer.close()


async def test_an_idle_follower_gets_keep_alives_and_a_shutdown_ends_its_body(
    processes: Processes, run_store: RunStore
) -> None:
    api, url = processes.api(LEASEHOLD_SSE_KEEPALIVE_S="0.2")
    run = (await run_store.create(NewRun(handler="demo.sleep", input={"seconds": 1}))).run
    reader, writer = await follow(url, run.id)  # no worker: nothing but keep-alives follow
    seen = await asyncio.wait_for(read_until(reader, b": ping", count=3), 30)
    assert seen.startswith(b"HTTP/1.1 200")
    assert seen.index(b"event: created") < seen.index(b": ping")

    api.signal(signal.SIGTERM)
    rest = await asyncio.wait_for(read_until(reader, END), 30)
    assert rest.endswith(END)  # the body ended, not cut: the client resumes by id
    assert api.wait(timeout_s=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    writer.close()
