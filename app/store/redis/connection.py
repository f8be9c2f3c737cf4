"""Builds Redis clients from a URL. The one place that knows connection options.

The URL alone chooses the deployment (``LEASEHOLD_REDIS_URL``):

=====================================================================  ==========
``redis://[[user]:pass@]host:port[/db]``, ``rediss://...``, ``unix://``  single node
``redis+cluster://[[user]:pass@]host:port[,host:port...][/]``          Redis Cluster
``redis+sentinel://[[user]:pass@]host:port[,...]/service_name[/db]``   Sentinel
=====================================================================  ==========

``rediss+cluster://`` and ``rediss+sentinel://`` use TLS (to the sentinels as
well). A cluster URL lists seed nodes, any of them enough to discover the rest; a
sentinel URL lists sentinels and names the monitored service. The credentials
in the URL are the data nodes'; sentinels that require their own take
``?sentinel_username=...&sentinel_password=...``. TLS options for both modes:
``ssl_cert_reqs`` (``required`` | ``optional`` | ``none``), ``ssl_ca_certs``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_check_hostname``. A single-node URL
takes whatever redis-py's ``from_url`` accepts. Anything else is an
:class:`~app.redis_url.InvalidRedisUrl` (parsing lives in :mod:`app.redis_url`),
raised before a socket is opened.

Clients decode responses to ``str``. Sockets have a connect timeout, and
keep-alive on, but no read timeout by default: blocking reads (XREAD BLOCK) must
be allowed to wait longer than any fixed socket timeout would. A client that
never blocks (the API's request client) asks for one with ``socket_timeout_s``,
so a Redis that accepts but stops answering (``CLIENT PAUSE``, a frozen node) is a
``TimeoutError`` after that long instead of a request that waits with it; such a
client does not resend a command that timed out, because the command may have
run (a create sent twice would make two runs). In cluster mode a node must
still show it is alive within the connect timeout: the handshake of a new
connection (AUTH, CLIENT SETINFO) and the health-check PING of an idle one are
bounded by it, so a node that accepts TCP but never answers (stopped, frozen,
``docker pause``) counts as unreachable and the slot map is read from another
node, instead of the client waiting on it forever.

A single-node ``rediss://`` client bounds the TLS handshake by the connect timeout
too: against a server that does not speak TLS (a plaintext port) the handshake
would otherwise wait forever for an answer the server never sends, since the
server is waiting for a command. It fails instead with
:class:`TlsHandshakeFailed`, which says so and is not retried (the next attempt
would meet the same server).

A command that fails on a connection error is retried a few times with a short
backoff (full jitter, as in :mod:`app.retry`), so a Redis restart or a failover
costs callers a reconnect, not an error. In cluster mode redis-py also refreshes
the slot map between attempts; in sentinel mode every new connection asks the
sentinels for the current primary.
This is safe for every script here: create is idempotent by run id, worker
writes are fenced, renewals and reads are idempotent, and a claim carries a
token (``claim_runs`` answers a repeated token with what it claimed the first
time), so a claim whose reply was lost after it ran returns the same runs.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as async_sentinel
import redis.sentinel as sync_sentinel
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import FullJitterBackoff
from redis.cluster import ClusterNode as SyncClusterNode
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from app.redis_url import Mode, RedisTarget, parse_redis_url
from app.store.redis.packing import hiredis_packing

try:  # newer redis-py (8 here): the name and version CLIENT SETINFO sends, given once
    from redis.driver_info import DriverInfo
except ImportError:  # older redis-py (5.x) reads its version once, at import
    DriverInfo = None  # type: ignore[assignment,misc]

CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30
RETRIES = 3
DEFAULT_MAX_CONNECTIONS = 64
# redis-py's cluster pools cannot wait for a free connection: past the cap a call
# fails. Connections are opened on demand, so a high cap costs nothing when idle.
CLUSTER_MIN_CONNECTIONS_PER_NODE = 512
RETRY_ON = [RedisConnectionError, RedisTimeoutError, ConnectionResetError]
# a client with a read timeout: a timed-out command may have run, so it is not resent
RETRY_ON_CONNECT = [RedisConnectionError, ConnectionResetError]

AsyncRedis: TypeAlias = aioredis.Redis | aioredis.RedisCluster
SyncRedis: TypeAlias = redis.Redis | redis.RedisCluster


class TlsHandshakeFailed(RedisError):
    """A rediss:// server did not complete a TLS handshake: most likely a plaintext port.

    A RedisError (callers treat it as "Redis unavailable"), but neither a
    ConnectionError nor a TimeoutError, so redis-py does not retry it.
    """

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(
            f"TLS handshake with {host}:{port} failed ({reason}): is the server speaking TLS? "
            "A rediss:// URL needs a TLS port; redis:// is for a plaintext one"
        )


def _handshake_failure(host: str, port: int, bound_s: float, exc: Exception) -> TlsHandshakeFailed:
    if isinstance(exc, TimeoutError):
        return TlsHandshakeFailed(host, port, f"no answer within {bound_s:g}s")
    return TlsHandshakeFailed(host, port, str(exc) or type(exc).__name__)


class _SyncTlsConnection(redis.SSLConnection):
    """redis-py's TLS connection with its handshake bounded by the connect timeout."""

    def _wrap_socket_with_ssl(self, sock: socket.socket) -> ssl.SSLSocket:
        bound_s = self.socket_connect_timeout or CONNECT_TIMEOUT_S
        sock.settimeout(bound_s)
        try:
            wrapped: ssl.SSLSocket = super()._wrap_socket_with_ssl(sock)  # type: ignore[no-untyped-call]
        except (TimeoutError, ssl.SSLError, ConnectionError) as exc:
            raise _handshake_failure(self.host, self.port, bound_s, exc) from exc
        wrapped.settimeout(self.socket_timeout)
        return wrapped


class _AsyncTlsConnection(aioredis.SSLConnection):
    """Async twin of :class:`_SyncTlsConnection`: TCP first, then TLS, each bounded.

    Connecting and handshaking in one step would report a plaintext port as
    "Timeout connecting to server" and retry it three times.
    """

    def _connection_arguments(self) -> Any:
        arguments = dict(super()._connection_arguments())
        arguments.pop("ssl", None)  # plain TCP first: the handshake follows in _connect
        return arguments

    async def _connect(self) -> None:
        await super()._connect()  # type: ignore[no-untyped-call]
        bound_s = self.socket_connect_timeout or CONNECT_TIMEOUT_S
        writer = self._writer
        assert writer is not None
        try:
            async with asyncio.timeout(bound_s):
                await writer.start_tls(self.ssl_context.get(), server_hostname=self.host)
        except (TimeoutError, ssl.SSLError, ConnectionError) as exc:
            # abort, not close: a half-done TLS session cannot shut down cleanly
            writer.transport.abort()
            self._reader = self._writer = None
            raise _handshake_failure(self.host, self.port, bound_s, exc) from exc

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        """redis-py wraps any error of ``_connect`` in a (retried) ConnectionError: unwrap ours."""
        try:
            await super().connect_check_health(check_health, retry_socket_connect)
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, TlsHandshakeFailed):
                raise exc.__cause__ from None
            raise


class PoolExhausted(RedisConnectionError):
    """Every connection of a pool stayed busy for the pool's whole wait: Redis is fine, we are full.

    A ``ConnectionError`` (so every "Redis unavailable: back off" path handles it)
    that says which: the API answers it with its own 503.
    """


def _backoff() -> FullJitterBackoff:
    # full jitter, like every retry loop above redis-py (app.retry): clients that lost
    # their connection together do not all reconnect in the same millisecond
    return FullJitterBackoff(cap=0.5, base=0.02)


def _driver() -> dict[str, Any]:
    """redis-py's name and version for CLIENT SETINFO, stated instead of looked up.

    Without it, a redis-py with ``redis.driver_info`` builds them anew for every
    connection it opens, reading its own installed metadata from disk
    (``importlib.metadata.version``: ~0.5 ms on the event loop, per connection: a pool
    that grows by 50 blocks the loop ~25 ms).
    ``redis.__version__`` is the same string. What Redis is told is unchanged.
    """
    if DriverInfo is None:
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def _common(*, socket_timeout_s: float | None) -> dict[str, Any]:
    """Options every data-node connection shares, in every mode."""
    return {
        **_driver(),
        "decode_responses": True,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": socket_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


def _node_auth(target: RedisTarget, *, ssl_flag: bool = True) -> dict[str, Any]:
    """Credentials and TLS of cluster nodes or the sentinels' primary (a single URL has its own).

    ``ssl_flag=False`` leaves out ``ssl=True`` for callers that pick a TLS
    connection class themselves.
    """
    options: dict[str, Any] = {
        "username": target.username,
        "password": target.password,
        **target.tls_options,
    }
    if target.tls and ssl_flag:
        options["ssl"] = True
    return options


def _sentinel_kwargs(target: RedisTarget) -> dict[str, Any]:
    """How to reach the sentinels themselves: their own credentials, the same TLS."""
    options: dict[str, Any] = {
        **_driver(),
        "decode_responses": True,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": CONNECT_TIMEOUT_S,
        "username": target.sentinel_auth.get("sentinel_username"),
        "password": target.sentinel_auth.get("sentinel_password"),
        **target.tls_options,
    }
    if target.tls:
        options["ssl"] = True
    return options


class _AsyncClusterConnection(aioredis.Connection):
    """A cluster node connection that gives up on a node which accepts TCP but never answers.

    The kernel completes the TCP handshake for a listening Redis even while the
    process is stopped, so the connect timeout alone does not notice a frozen
    node. Without a read timeout (see the module docstring), the first reply
    would then be awaited forever: building the slot map tries one seed at a
    time, in random order, and a client that picks the frozen one first never
    starts. Here the handshake of a new connection and the health-check PING of
    an idle one must answer within the connect timeout, or the attempt fails with
    redis-py's TimeoutError (a RedisError), which discovery treats as "try the
    next node" and callers as "back off and retry". Replies to commands are left
    unbounded.
    """

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        async with _answered_within(self, "the connection handshake"):
            await super().on_connect_check_health(check_health)

    async def check_health(self) -> None:
        async with _answered_within(self, "the health check"):
            await super().check_health()  # type: ignore[no-untyped-call]


class _AsyncClusterSSLConnection(_AsyncClusterConnection, aioredis.SSLConnection):
    """TLS twin of :class:`_AsyncClusterConnection`."""


@asynccontextmanager
async def _answered_within(connection: _AsyncClusterConnection, what: str) -> AsyncIterator[None]:
    """Raise redis-py's TimeoutError when the block outlasts the connection's connect timeout.

    The read cut short disconnects (redis-py closes a connection whose read was
    interrupted), so the next use starts a fresh connection.
    """
    bound_s = connection.socket_connect_timeout or CONNECT_TIMEOUT_S
    try:
        async with asyncio.timeout(bound_s):
            yield
    except TimeoutError as exc:  # the builtin one, raised by asyncio.timeout
        where = f"{connection.host}:{connection.port}"
        raise RedisTimeoutError(f"{where} did not answer {what} within {bound_s}s") from exc


class _AsyncCluster(aioredis.RedisCluster):
    """redis-py's async cluster client, with its topology failures raised as ConnectionError.

    Mid-failover, building the slot map can fail with RedisClusterException, which
    is not a RedisError: no seed answers, the nodes disagree on who serves a slot,
    or a slot has no owner for a moment. Every caller here treats RedisError and
    OSError as "Redis is unavailable: back off and retry", so a failover must look
    like one, not like a bug that ends a courier or a listener. Other
    RedisClusterExceptions (a cross-slot call: a bug) are left as they are.

    Every node connects with :class:`_AsyncClusterConnection`. redis-py's
    constructor takes no connection class, so it is swapped in where nodes get
    theirs: on the seed nodes, and in the connection options the slot map
    builder hands to every node it discovers later.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        tls = issubclass(self.connection_kwargs["connection_class"], aioredis.SSLConnection)
        bounded = _AsyncClusterSSLConnection if tls else _AsyncClusterConnection
        for options in (self.connection_kwargs, self.nodes_manager.connection_kwargs):
            options["connection_class"] = bounded  # for every node discovered from now on
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = bounded

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> aioredis.RedisCluster:
        try:
            return await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        except RedisClusterException as exc:
            raise RedisConnectionError(f"cluster topology unavailable: {exc}") from exc


class _AsyncSentinelConnection(async_sentinel.SentinelManagedConnection):
    """A connection to the primary the sentinels name *now*, however it reconnects.

    redis-py asks the sentinels only in ``connect()``; a command that finds its
    connection dropped reconnects through another path to the connection's last
    address, which after a failover is the dead or demoted primary, so every
    retry fails. Asking before every TCP connect makes each retry a real one.
    """

    async def _connect(self) -> None:
        if self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super()._connect()  # type: ignore[no-untyped-call]


class _AsyncSentinelSSLConnection(_AsyncSentinelConnection, aioredis.SSLConnection):
    """TLS twin of :class:`_AsyncSentinelConnection`."""


class _SyncSentinelConnection(sync_sentinel.SentinelManagedConnection):
    """Sync twin of :class:`_AsyncSentinelConnection`, for the heartbeat thread."""

    def _connect(self) -> socket.socket:
        if self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        sock: socket.socket = super()._connect()  # type: ignore[no-untyped-call]
        return sock


class _SyncSentinelSSLConnection(_SyncSentinelConnection, redis.SSLConnection):
    """TLS twin of :class:`_SyncSentinelConnection`."""


def _unread(connection: Any) -> bool | None:
    """Whether a pooled connection holds bytes nobody read (True), is open with none
    (False), or cannot be told by looking (None: closed, no hiredis, another layout).

    What redis-py 8's own check looks at (the stream's buffer and EOF, hiredis'
    buffer), without the loop iteration redis-py 5's check spends on a read with a
    zero timeout.
    """
    stream = getattr(connection, "_reader", None)
    if not isinstance(stream, asyncio.StreamReader) or stream.at_eof():
        return None
    parser = getattr(getattr(connection, "_parser", None), "_reader", None)
    has_data = getattr(parser, "has_data", None)
    buffered = getattr(stream, "_buffer", None)
    if not callable(has_data) or buffered is None:
        return None
    return bool(buffered) or bool(has_data())


class _BoundedWaitPool(aioredis.BlockingConnectionPool):
    """A blocking pool whose bounded wait for a free connection ends in :class:`PoolExhausted`.

    redis-py raises a plain ``ConnectionError("No connection available.")``,
    indistinguishable from an unreachable Redis but for its cause.

    Taking an idle connection when nobody waits skips the condition and the timer
    the blocking pool arms for every command, and giving one back then skips the
    condition too. For a command that arrives at an idle machine, as a create at
    50 runs/s does, that was 50-150 µs less per round trip with redis-py 5.3 and
    20-30 µs with 8.1 (issue 19 aim 5; BENCHMARKS.md, seventh stop). Once a caller
    waits, every take and give-back goes through redis-py's condition, in its order,
    so a waiter is never passed over.
    """

    _waiting = 0  # callers inside redis-py's get_connection (waiting, or opening one)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """An idle connection at once when nobody waits, else redis-py's bounded wait."""
        if self._available_connections and not self._waiting and not self._maintaining():
            connection = self.get_available_connection()  # type: ignore[no-untyped-call]
            try:
                await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        self._waiting += 1
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise PoolExhausted(
                    f"all {self.max_connections} Redis connections stayed busy for {self.timeout}s"
                ) from exc
            raise
        finally:
            self._waiting -= 1

    async def release(self, connection: Any) -> None:
        """Give a connection back; through the condition (waking a waiter) when one waits."""
        if self._waiting:
            await super().release(connection)
            return
        await aioredis.ConnectionPool.release(self, connection)
        if self._waiting:  # one began waiting while the release yielded: wake it
            async with self._condition:
                self._condition.notify()

    async def ensure_connection(self, connection: Any) -> None:
        """Hand out only a connection whose next reply answers the next command.

        Little arrives unasked on these connections: they speak RESP2 (redis-py 5) or
        RESP3 (redis-py 8's default, our lock) without client tracking, so the only
        pushes are redis-py 8's maintenance notices, on where the server offers them
        (Redis Enterprise and Redis Cloud; not Redis OSS 7). Bytes waiting on an idle
        connection are then a reply nobody read, or such a notice, and the connection
        is opened afresh either way: a stale reply never answers a command (redis-py 8
        would keep the connection and answer the next command with it), and a notice
        costs a reconnect to the address the pool has, as any dropped connection does.
        """
        unread = _unread(connection)
        if unread is False:
            return
        if unread:
            await connection.disconnect()
        await super().ensure_connection(connection)

    def _maintaining(self) -> bool:
        """redis-py 8's maintenance mode (a MOVING notice being applied): its locked path."""
        return bool(getattr(self, "_in_maintenance", False))


class _AsyncSentinelPool(async_sentinel.SentinelConnectionPool, _BoundedWaitPool):
    """Sentinel discovery with a pool that waits for a free connection, like single mode.

    Closing it (the client's ``aclose``) also closes the connections to the
    sentinels, which redis-py leaves open; a discovery-time disconnect of idle
    connections (``inuse_connections=False``) keeps them.
    """

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:
            await self.sentinel_manager.aclose()


class _SyncSentinelPool(sync_sentinel.SentinelConnectionPool):
    """Sync twin of :class:`_AsyncSentinelPool` (the heartbeat thread needs no waiting)."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:
                sentinel.close()


def async_client(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout_s: float | None = None,
    socket_timeout_s: float | None = None,
) -> AsyncRedis:
    """An asyncio client with its own pool, for the API, the worker loop and the CLI.

    The single-node and sentinel pools block when all ``max_connections`` are busy
    instead of failing, so a burst of concurrent calls queues up rather than
    erroring; for at most ``pool_timeout_s`` when given (then :class:`PoolExhausted`),
    which a request path sets so that a full pool is a 503, never a hang. In
    cluster mode the cap is per node and at least
    :data:`CLUSTER_MIN_CONNECTIONS_PER_NODE` (see there), and a full node's pool
    fails at once with redis-py's ``MaxConnectionsError``. With ``socket_timeout_s``
    every reply must come within it (never use it for blocking reads), and a reply
    that does not is raised, not retried: the command may have run. Raises
    :class:`InvalidRedisUrl`.
    """
    target = parse_redis_url(url)
    resend_on = RETRY_ON if socket_timeout_s is None else RETRY_ON_CONNECT
    options = {
        # redis-py's Retry resends on a timeout unless told which errors it supports
        "retry": AsyncRetry(_backoff(), RETRIES, supported_errors=tuple(resend_on)),
        "retry_on_error": resend_on,
        **_common(socket_timeout_s=socket_timeout_s),
    }
    if target.mode == "cluster":
        return _AsyncCluster(
            startup_nodes=[AsyncClusterNode(host, port) for host, port in target.nodes],
            max_connections=max(max_connections, CLUSTER_MIN_CONNECTIONS_PER_NODE),
            **options,
            **_node_auth(target),
        )
    if target.mode == "sentinel":
        # redis-py 8.1 leaves Sentinel untyped and 8.2 types it: the ignore holds for both
        manager = async_sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(target.nodes), sentinel_kwargs=_sentinel_kwargs(target)
        )
        client: aioredis.Redis = manager.master_for(
            target.service_name,
            redis_class=aioredis.Redis,
            connection_pool_class=_AsyncSentinelPool,
            connection_class=hiredis_packing(
                _AsyncSentinelSSLConnection if target.tls else _AsyncSentinelConnection
            ),
            max_connections=max_connections,
            timeout=pool_timeout_s,  # None: wait for a free connection as long as it takes
            db=target.db,
            **options,
            **_node_auth(target, ssl_flag=False),
        )
        return client
    pool = _BoundedWaitPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout_s, **options
    )
    if target.tls:
        # the async from_url ignores a connection_class argument (the sync one honours it)
        pool.connection_class = _AsyncTlsConnection
    pool.connection_class = hiredis_packing(pool.connection_class)
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes it


def sync_client(
    url: str,
    *,
    socket_timeout_s: float | None = None,
    retries: int = RETRIES,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> SyncRedis:
    """A blocking client, for threads that must not depend on the event loop.

    The heartbeat uses a socket timeout no longer than the lease safety margin and
    no retries of its own (it retries every beat), so a silent Redis can never keep
    it from checking the jeopardy deadline in time. Raises :class:`InvalidRedisUrl`.

    Unlike the others, a cluster client connects at once: redis-py's sync cluster
    client reads the slot map in its constructor (RedisClusterException when no
    seed answers), so build it once Redis is known to be up.
    """
    target = parse_redis_url(url)
    options = {
        "retry": Retry(_backoff(), retries),
        "retry_on_error": RETRY_ON,
        **_common(socket_timeout_s=socket_timeout_s),
        "socket_connect_timeout": connect_timeout_s,
    }
    if target.mode == "cluster":
        return redis.RedisCluster(
            startup_nodes=[
                SyncClusterNode(host, port)  # type: ignore[no-untyped-call]
                for host, port in target.nodes
            ],
            **options,
            **_node_auth(target),
        )
    if target.mode == "sentinel":
        # untyped in redis-py 8.1, typed in 8.2: the ignores hold for both
        manager = sync_sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(target.nodes), sentinel_kwargs=_sentinel_kwargs(target)
        )
        sentinel_client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            target.service_name,
            redis_class=redis.Redis,
            connection_pool_class=_SyncSentinelPool,
            connection_class=_SyncSentinelSSLConnection if target.tls else _SyncSentinelConnection,
            db=target.db,
            **options,
            **_node_auth(target, ssl_flag=False),
        )
        return sentinel_client
    if target.tls:
        options["connection_class"] = _SyncTlsConnection
    client: redis.Redis = redis.Redis.from_url(url, **options)
    return client


def mode_of(client: AsyncRedis | SyncRedis) -> Mode:
    """Which kind of deployment a client built here talks to."""
    if isinstance(client, aioredis.RedisCluster | redis.RedisCluster):
        return "cluster"
    pool = client.connection_pool
    if isinstance(
        pool, async_sentinel.SentinelConnectionPool | sync_sentinel.SentinelConnectionPool
    ):
        return "sentinel"
    return "single"
