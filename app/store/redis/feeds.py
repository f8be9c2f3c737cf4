"""Waiting for news on many streams at once: one blocking ``XREAD`` serves them all.

The API's live feeds (a run's events, a queue's activity) read their streams
without blocking and, once caught up, wait here. One ``XREAD BLOCK`` takes any
number of keys and returns as soon as one of them has an entry past its
position, so a process following a thousand streams holds one connection for
the wait, not a thousand.

Redis Cluster refuses a command whose keys live in different slots. Every key
of a queue carries the queue's hash tag (``app.store.keys``), so there the
streams are grouped by hash tag: one wait per queue followed, still one
connection per queue, never one per run.
"""

from __future__ import annotations

from typing import Any, cast

from app.store.redis.connection import AsyncRedis, mode_of

SINGLE_GROUP = ""


def read_group(client: AsyncRedis, key: str) -> str:
    """Which keys may share one wait with ``key``: all of them, or (in a cluster) its hash tag's."""
    if mode_of(client) != "cluster":
        return SINGLE_GROUP
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if 0 <= start < end else key


async def wait_for_news(
    client: AsyncRedis, positions: dict[str, str], *, block_ms: int
) -> set[str]:
    """The keys whose streams have an entry after their position, waiting up to ``block_ms``.

    An empty set when nothing came in time. Holds one connection for the whole
    wait; a key without a stream yet is waited on like any other. Every key must
    be in one :func:`read_group`.
    """
    if not positions:
        return set()
    streams: dict[Any, Any] = dict(positions)
    reply = cast(
        list[tuple[str, object]] | None, await client.xread(streams, count=1, block=block_ms)
    )
    return {key for key, _ in reply or []}
