"""Builds Redis clients from a URL. The one place that knows connection options.

Clients decode responses to ``str``. Sockets have a connect timeout, and
keep-alive on, but no read timeout: blocking reads (BLPOP, XREAD BLOCK) must be
allowed to wait longer than any fixed socket timeout would.
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30


def async_client(url: str) -> aioredis.Redis:
    """An asyncio client with its own pool, for the API, the worker loop and the CLI."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_keepalive=True, health_check_interval=HEALTH_CHECK_INTERVAL_S)
    return client


def sync_client(url: str, *, socket_timeout_s: float | None = None) -> redis.Redis:
    """A blocking client, for threads that must not depend on the event loop."""
    client: redis.Redis = redis.Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=socket_timeout_s, socket_keepalive=True,
        health_check_interval=HEALTH_CHECK_INTERVAL_S)
    return client
