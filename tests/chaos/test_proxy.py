"""The partition proxy: it forwards, blackholes without resetting, and heals two ways."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from tools.chaos.proxy import BlackholeProxy

pytestmark = pytest.mark.chaos

SILENCE_S = 0.5


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A loopback echo server standing in for Redis."""
    connections: set[asyncio.StreamWriter] = set()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.add(writer)
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        await close(writer)

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    for writer in connections:
        await close(writer)
    await asyncio.sleep(0.05)  # let the handlers see their connections close


@pytest.fixture
def proxy(echo_port: int) -> Iterator[BlackholeProxy]:
    started = BlackholeProxy(echo_port).start()
    yield started
    started.stop()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes
) -> bytes:
    writer.write(payload)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(payload)), timeout=10)


async def cut_after_use(
    proxy: BlackholeProxy, payload: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that worked, then a partition, then ``payload`` sent into the silence."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await roundtrip(reader, writer, b"linked") == b"linked"
    proxy.blackhole()
    writer.write(payload)
    await writer.drain()
    return reader, writer


async def test_the_proxy_forwards_both_ways(proxy: BlackholeProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await roundtrip(reader, writer, b"PING") == b"PING"
    await close(writer)


async def test_a_blackhole_is_silence_not_a_reset_and_a_late_heal_delivers(
    proxy: BlackholeProxy,
) -> None:
    reader, writer = await cut_after_use(proxy, b"during")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), timeout=SILENCE_S)  # no answer, no EOF
    assert not reader.at_eof()
    proxy.heal(reset=False)
    assert await asyncio.wait_for(reader.readexactly(6), timeout=10) == b"during"
    await close(writer)


async def test_a_resetting_heal_drops_held_connections_and_new_ones_work(
    proxy: BlackholeProxy,
) -> None:
    reader, writer = await cut_after_use(proxy, b"lost")
    proxy.heal(reset=True)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(4), timeout=10)
    fresh_reader, fresh_writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await roundtrip(fresh_reader, fresh_writer, b"again") == b"again"
    await close(fresh_writer)
    await close(writer)


async def test_a_connection_opened_during_a_blackhole_waits_for_the_heal(
    proxy: BlackholeProxy,
) -> None:
    proxy.blackhole()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"hello")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), timeout=SILENCE_S)
    proxy.heal(reset=False)
    assert await asyncio.wait_for(reader.readexactly(5), timeout=10) == b"hello"
    await close(writer)
