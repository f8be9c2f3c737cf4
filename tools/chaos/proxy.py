"""A loopback TCP proxy the harness puts between one worker and Redis, to partition them.

Every worker of the chaos cluster reaches Redis through its own proxy, so any
one of them can be cut off while the others (and the APIs) keep talking to
Redis directly. A partition is a *blackhole*, not a refusal: the proxy stops
forwarding in both directions and keeps every connection open, so the worker
sees silence (its heartbeat times out, its in-flight calls hang) rather than
resets it could react to at once. New connections made during the partition are
accepted and held too.

When the partition heals, the held connections either resume, delivering what
was sent into the silence late (as TCP retransmission does after a short
partition: the hardest case for fencing, since a stale write arrives after the
takeover), or are reset (as after a long one: the worker reconnects).

The proxy runs its own event loop on a thread, so the harness's workload cannot
delay its forwarding, and it is controlled from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

CHUNK_BYTES = 65_536
CLOSE_GRACE_S = 0.05


@dataclass(eq=False)  # held in a set by identity
class _Link:
    """One proxied connection: the worker's side and Redis's side."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        """Reset both sides at once (RST, not FIN)."""
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class BlackholeProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``; can blackhole it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._open = asyncio.Event()
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """The Redis URL a worker behind this proxy connects with."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def partitioned(self) -> bool:
        """True while forwarding is stopped."""
        return not self._open.is_set()

    def start(self) -> BlackholeProxy:
        """Listen on a free loopback port and start forwarding."""
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        """Close every connection and the listener, then stop the thread."""
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def blackhole(self) -> None:
        """Stop forwarding; connections stay open and silent."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self, *, reset: bool) -> None:
        """Forward again: held data is delivered late, or (``reset``) every held link is reset."""
        self._call(self._heal(reset))

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        tasks = [task for link in self._links for task in link.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(CLOSE_GRACE_S)  # aborted transports close their sockets next turn

    async def _heal(self, reset: bool) -> None:
        if reset:
            for link in list(self._links):
                link.abort()
        self._open.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._open.wait()  # a connection made during a partition hangs here
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return  # Redis is down: the worker sees its connection close
            link.upstream = up_writer
            link.tasks = [
                asyncio.create_task(self._pump(reader, up_writer, to_redis=True)),
                asyncio.create_task(self._pump(up_reader, writer, to_redis=False)),
            ]
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._links.discard(link)
            for task in link.tasks:
                task.cancel()
            link.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_redis: bool
    ) -> None:
        """Copy one direction; during a partition, hold what was read until it heals."""
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                await self._open.wait()
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    return
                await self._before_forward(data, to_redis=to_redis)
                await self._open.wait()
                writer.write(data)
                await writer.drain()

    async def _before_forward(self, data: bytes, *, to_redis: bool) -> None:
        """Called with each chunk read, before it is forwarded: a subclass may hold it.

        Nothing here; the tests' :class:`tests.support.proxies.HoldingProxy` holds the
        chunks that carry a marker, to open a window between two of a worker's messages.
        """
