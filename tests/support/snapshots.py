"""Every key under a prefix, read by type: to show that a refused request changed nothing."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis


async def snapshot(client: aioredis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under the prefix with its type, whether it expires, and its content."""
    state: dict[str, Any] = {}
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        ttl = await client.pttl(key)
        kind = await client.type(key)
        content: Any
        if ttl == -2 or kind == "none":  # its TTL ran out between the scan and this read
            continue
        if kind == "hash":
            content = await client.hgetall(key)
        elif kind == "string":
            content = await client.get(key)
        elif kind == "list":
            content = await client.lrange(key, 0, -1)
        elif kind == "zset":
            content = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            content = sorted(await client.smembers(key))
        elif kind == "stream":
            content = await client.xrange(key)
        else:
            content = await client.dump(key)
        state[key] = (kind, ttl != -1, content)
    return state


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
