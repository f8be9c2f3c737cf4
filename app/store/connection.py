"""Builds Redis clients from a URL. The one place that knows connection options.

Clients decode responses to ``str``. Sockets have a connect timeout, and
keep-alive on, but no read timeout: blocking reads (BLPOP, XREAD BLOCK) must be
allowed to wait longer than any fixed socket timeout would.

A command that fails on a connection error is retried a few times with a short
backoff, so a Redis restart costs callers a reconnect, not an error. This is
safe for every script here: create is idempotent by run id, worker writes are
fenced, renewals and reads are idempotent. The one imperfect case is a claim
whose reply is lost after it ran: those runs stay leased to a worker that never
started them, so their lease expires and the reconciler applies the policy.
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30
RETRIES = 3
DEFAULT_MAX_CONNECTIONS = 64
RETRY_ON = [RedisConnectionError, RedisTimeoutError, ConnectionResetError]


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.5, base=0.02)


def async_client(url: str, *, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> aioredis.Redis:
    """An asyncio client with its own pool, for the API, the worker loop and the CLI.

    The pool blocks when all ``max_connections`` are busy instead of failing, so a
    burst of concurrent calls queues up rather than erroring.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=None,
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_keepalive=True,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry=AsyncRetry(_backoff(), RETRIES),
        retry_on_error=RETRY_ON,
    )
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes it


def sync_client(
    url: str, *, socket_timeout_s: float | None = None, retries: int = RETRIES
) -> redis.Redis:
    """A blocking client, for threads that must not depend on the event loop.

    The heartbeat uses a socket timeout no longer than the lease safety margin and
    no retries of its own (it retries every beat), so a silent Redis can never keep
    it from checking the jeopardy deadline in time.
    """
    client: redis.Redis = redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=socket_timeout_s,
        socket_keepalive=True,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry=Retry(_backoff(), retries),
        retry_on_error=RETRY_ON,
    )
    return client
