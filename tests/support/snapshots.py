"""Every key under a prefix, read by type: to show that a refused request changed nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

_READS: dict[str, Callable[[Any, str], Any]] = {
    "hash": lambda pipe, key: pipe.hgetall(key),
    "string": lambda pipe, key: pipe.get(key),
    "list": lambda pipe, key: pipe.lrange(key, 0, -1),
    "zset": lambda pipe, key: pipe.zrange(key, 0, -1, withscores=True),
    "set": lambda pipe, key: pipe.smembers(key),
    "stream": lambda pipe, key: pipe.xrange(key),
}


async def snapshot(client: aioredis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under the prefix with its type, whether it expires, and its content.

    Two pipelined round trips after the scan (type and TTL, then the reads), so
    tests that compare thousands of states stay fast.
    """
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
        pipe.type(key)
    meta = await pipe.execute()
    # a key whose TTL ran out between the scan and this read is gone: skip it
    present = [
        (key, ttl, kind)
        for key, ttl, kind in zip(keys, meta[::2], meta[1::2], strict=True)
        if ttl != -2 and kind != "none"
    ]
    pipe = client.pipeline(transaction=False)
    for key, _, kind in present:
        _READS.get(kind, lambda p, k: p.dump(k))(pipe, key)
    contents = await pipe.execute()
    return {
        key: (kind, ttl != -1, sorted(content) if kind == "set" else content)
        for (key, ttl, kind), content in zip(present, contents, strict=True)
    }


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Keys that differ; a key with a TTL that ran out meanwhile (a claim receipt) is no change."""
    expired = {
        key
        for key, (_, expires, _) in before.items()
        if expires and (key not in after or after[key][2] is None)
    }
    return {
        key: (before.get(key), after.get(key))
        for key in (before.keys() | after.keys()) - expired
        if before.get(key) != after.get(key)
    }
