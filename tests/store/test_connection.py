"""The Redis URL alone picks the mode; a URL we cannot use is refused before any socket opens."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.errors import ConfigurationError
from app.redis_url import InvalidRedisUrl, parse_redis_url
from app.settings import load_settings
from app.store.redis import connection
from app.store.redis.connection import async_client, mode_of, sync_client


def test_single_node_urls_are_handed_to_redis_py_unchanged() -> None:
    for url in ("redis://localhost:6379/2", "rediss://:pw@cache:6380/0", "unix:///tmp/r.sock"):
        target = parse_redis_url(url)
        assert target.mode == "single"
        assert target.url == url
    assert parse_redis_url("rediss://h:1").tls


def test_cluster_url_lists_seed_nodes_and_credentials() -> None:
    target = parse_redis_url("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002")
    assert target.mode == "cluster"
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (target.username, target.password) == ("app", "s@cret")
    assert not target.tls


def test_tls_cluster_url_takes_certificate_options() -> None:
    target = parse_redis_url(
        "rediss+cluster://:pw@h1:7000,h2:7000/?ssl_cert_reqs=none&ssl_check_hostname=false"
        "&ssl_ca_certs=/etc/ca.pem"
    )
    assert target.tls
    assert target.username is None and target.password == "pw"
    assert target.tls_options == {
        "ssl_cert_reqs": "none",
        "ssl_check_hostname": False,
        "ssl_ca_certs": "/etc/ca.pem",
    }


def test_sentinel_url_names_sentinels_service_and_database() -> None:
    target = parse_redis_url(
        "redis+sentinel://:datapw@s1:26379,s2:26379,s3:26379/mymaster/3?sentinel_password=sentpw"
    )
    assert target.mode == "sentinel"
    assert target.seeds == ["s1:26379", "s2:26379", "s3:26379"]
    assert (target.service_name, target.db) == ("mymaster", 3)
    assert target.password == "datapw"
    assert target.sentinel_auth == {"sentinel_password": "sentpw"}


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("http://h:1", "scheme"),
        ("redis+cluster://h1:7000,h2", "host:port"),
        ("redis+cluster://h1:7000/2", "database 0"),
        ("redis+sentinel://s1:26379", "service_name"),
        ("redis+sentinel://s1:26379/mymaster/x", "service_name"),
        ("redis+cluster://h1:7000/?ssl_cert_reqs=none", "rediss"),
        ("rediss+cluster://h1:7000/?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
        ("redis+cluster://h1:7000/?socket_timeout=1", "socket_timeout"),
    ],
)
def test_unusable_urls_are_refused_with_a_reason(url: str, complaint: str) -> None:
    with pytest.raises(InvalidRedisUrl, match=complaint):
        parse_redis_url(url)


def test_an_invalid_url_stops_settings_without_echoing_the_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(redis_url="redis+sentinel://:hunter2@s1:26379")
    message = str(caught.value)
    assert "LEASEHOLD_REDIS_URL" in message and "service_name" in message
    assert "hunter2" not in message


async def test_every_mode_builds_its_client_without_connecting() -> None:
    cluster = async_client("redis+cluster://127.0.0.1:1,127.0.0.1:2")
    sentinel = async_client("redis+sentinel://127.0.0.1:1/mymaster")
    single = async_client("redis://127.0.0.1:1/0")
    assert isinstance(cluster, aioredis.RedisCluster)
    assert [mode_of(c) for c in (single, cluster, sentinel)] == ["single", "cluster", "sentinel"]
    for client in (single, cluster, sentinel):
        await client.aclose()
    # (redis-py's sync cluster client reads the slot map in its constructor: see tests/cluster)
    blocking = sync_client("redis+sentinel://127.0.0.1:1/mymaster", socket_timeout_s=0.1)
    assert mode_of(blocking) == "sentinel"
    blocking.close()


@pytest.fixture
def connect_timeout_s(monkeypatch: pytest.MonkeyPatch) -> float:
    """A short connect timeout for the clients this test builds."""
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_S", 0.3)
    return 0.3


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP but never answers: what a stopped (SIGSTOP) Redis looks like."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes handshakes; nothing ever reads
        yield listener.getsockname()[1]


async def test_a_cluster_seed_that_accepts_but_never_answers_is_given_up_in_time(
    connect_timeout_s: float, silent_port: int
) -> None:
    client = async_client(f"redis+cluster://:pw@127.0.0.1:{silent_port}")
    started = time.monotonic()
    try:
        with pytest.raises(RedisConnectionError, match="did not answer the connection handshake"):
            await asyncio.wait_for(client.initialize(), 10)  # before the bound: forever
        assert time.monotonic() - started < connect_timeout_s + 2
    finally:
        await client.aclose()


async def _answer_ok_until(
    silent: asyncio.Event, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A Redis stand-in: reads RESP commands, answers each until ``silent`` is set.

    HELLO gets the reply a Redis 7 gives (a map in RESP3, a flat array in RESP2: redis-py
    8.2 reads the negotiated protocol from it), PING ``+PONG``, anything else ``+OK``.
    """
    while header := await reader.readline():
        words = []
        for _ in range(int(header[1:])):
            length = int((await reader.readline())[1:])
            words.append((await reader.readexactly(length + 2))[:-2])
        if not silent.is_set():
            writer.write(_reply_to(words))
            await writer.drain()
    writer.close()


def _reply_to(words: list[bytes]) -> bytes:
    command = words[0].upper()
    if command == b"PING":
        return b"+PONG\r\n"
    if command != b"HELLO":
        return b"+OK\r\n"
    protocol = int(words[1]) if len(words) > 1 else 2
    fields = {b"server": b"redis", b"version": b"7.0.15", b"mode": b"cluster", b"role": b"master"}
    body = b"$5\r\nproto\r\n:%d\r\n" % protocol + b"".join(
        b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v) for k, v in fields.items()
    )
    pairs = len(fields) + 1
    return (b"%%%d\r\n" % pairs if protocol == 3 else b"*%d\r\n" % (2 * pairs)) + body


async def test_an_idle_cluster_connection_to_a_node_gone_silent_fails_its_health_check(
    connect_timeout_s: float,
) -> None:
    silent = asyncio.Event()
    server = await asyncio.start_server(
        lambda reader, writer: _answer_ok_until(silent, reader, writer), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    client = async_client(f"redis+cluster://127.0.0.1:{port}")
    # a seed node's own connection: the kind a slot map refresh reuses to ask CLUSTER SLOTS
    node = next(iter(client.nodes_manager.startup_nodes.values()))
    conn = node.acquire_connection()
    try:
        await conn.connect()  # HELLO and CLIENT SETINFO answered
        silent.set()
        conn.next_health_check = -1  # idle long enough to be PINGed before its next command
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError, match="did not answer the health check"):
            await asyncio.wait_for(conn.send_command("CLUSTER", "SLOTS"), 10)
        assert time.monotonic() - started < connect_timeout_s + 2
        assert not conn.is_connected  # the next use starts afresh
    finally:
        await conn.disconnect()
        node.release(conn)
        await client.aclose()
        server.close()
        await server.wait_closed()


# The single-node pool hands out an idle connection without redis-py's condition when
# nobody waits (connection._BoundedWaitPool): what a caller sees must not change.


async def test_a_full_pool_serves_every_waiter_in_turn(redis_url: str) -> None:
    client = async_client(redis_url, max_connections=2, pool_timeout_s=10)
    try:
        started = time.monotonic()
        # 12 callers, 2 connections, each call holding its connection 50 ms: 6 rounds
        replies = await asyncio.wait_for(
            asyncio.gather(*(client.blpop([f"lh-test:pool:{i}"], timeout=0.05) for i in range(12))),
            10,
        )
        assert replies == [None] * 12
        assert time.monotonic() - started < 5
        # between waits and after them, commands still go through in order
        await client.rpush("lh-test:pool:order", *range(20))
        assert await client.lrange("lh-test:pool:order", 0, -1) == [str(i) for i in range(20)]
        pool = client.connection_pool
        assert len(pool._in_use_connections) == 0  # every connection came back
        assert len(pool._available_connections) <= 2
    finally:
        await client.delete("lh-test:pool:order")
        await client.aclose()


async def test_a_waiter_gets_the_connection_given_back_before_a_newcomer(redis_url: str) -> None:
    client = async_client(redis_url, max_connections=1, pool_timeout_s=10)
    try:
        holder = asyncio.create_task(client.blpop(["lh-test:pool:hold"], timeout=0.2))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(client.ping())  # waits for the only connection
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await holder
        # the waiter was woken by the give-back: it must finish, not time out in 10 s
        assert await asyncio.wait_for(waiter, 2) is True
    finally:
        await client.aclose()


async def test_a_connection_the_server_closed_while_idle_is_replaced(redis_url: str) -> None:
    client = async_client(redis_url)
    admin = async_client(redis_url)
    try:
        await client.set("lh-test:pool:key", "v")
        name = f"lh-test-{time.monotonic_ns()}"
        await client.client_setname(name)
        killed = await admin.execute_command("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal")
        assert killed >= 1
        await asyncio.sleep(0.05)  # the EOF reaches the idle connection's stream
        assert await client.get("lh-test:pool:key") == "v"
    finally:
        await admin.delete("lh-test:pool:key")
        await client.aclose()
        await admin.aclose()


async def test_a_connection_given_back_with_an_unread_reply_never_answers_the_next_call(
    redis_url: str,
) -> None:
    client = async_client(redis_url)
    try:
        await client.set("lh-test:pool:key", "value")
        pool = client.connection_pool
        conn = await pool.get_connection()
        await conn.send_command("PING")  # its PONG is never read
        await pool.release(conn)
        await asyncio.sleep(0.05)  # the PONG lands in the connection's buffer
        assert await client.get("lh-test:pool:key") == "value"
    finally:
        await client.delete("lh-test:pool:key")
        await client.aclose()


async def test_a_command_cancelled_before_its_reply_leaves_no_reply_for_the_next(
    redis_url: str,
) -> None:
    client = async_client(redis_url, max_connections=1)
    try:
        await client.set("lh-test:pool:key", "value")
        waiting = asyncio.create_task(client.blpop(["lh-test:pool:nothing"], timeout=0.2))
        await asyncio.sleep(0.05)
        waiting.cancel()  # as a request whose client went away is cancelled mid-call
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0.3)  # BLPOP's nil reply has arrived, on whatever it was sent on
        assert await client.get("lh-test:pool:key") == "value"
    finally:
        await client.delete("lh-test:pool:key")
        await client.aclose()


async def test_opening_connections_never_reads_redis_pys_metadata_from_disk(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py 8 looks its version up from its installed metadata for every connection it
    # opens unless told it (~0.5 ms on the event loop each); the clients here tell it
    import redis.utils

    looked_up: list[str] = []

    def lookup() -> str:
        looked_up.append("lib version")
        return "looked up"

    monkeypatch.setattr(redis.utils, "get_lib_version", lookup)
    client = async_client(redis_url, max_connections=4)
    blocking = sync_client(redis_url)
    try:
        # four callers at once: the pool opens a connection for each
        await asyncio.gather(*(client.execute_command("CLIENT", "ID") for _ in range(4)))
        assert blocking.ping()
    finally:
        await client.aclose()
        blocking.close()
    assert looked_up == []
