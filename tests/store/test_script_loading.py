"""Loading the scripts at start: sent when Redis lacks any, not again when it has them all.

A worker loads every transition before it claims (a broken script fails at start).
What Redis already caches (same source, same SHA-1) is not sent again: one SCRIPT
EXISTS instead of ~1.1 MB of Lua before the first claim (issue 19, start-up).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from app.store.lua.scripts import Scripts


async def script_loads(client: aioredis.Redis) -> int:
    """SCRIPT LOAD commands this server has run so far."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_script|load", {}).get("calls", 0))


async def test_scripts_are_sent_only_when_redis_lacks_one(redis_client: aioredis.Redis) -> None:
    scripts = Scripts()
    await redis_client.script_flush()
    before = await script_loads(redis_client)
    await scripts.load_all(redis_client)
    assert await scripts.loaded(redis_client)
    sent = await script_loads(redis_client) - before
    assert sent == len(scripts.names)

    await scripts.load_all(redis_client)  # all cached: nothing sent
    assert await script_loads(redis_client) - before == sent

    # one missing (a SCRIPT FLUSH, a restarted Redis): all are sent again
    await redis_client.script_flush()
    assert not await scripts.loaded(redis_client)
    await scripts.load_all(redis_client)
    assert await scripts.loaded(redis_client)
    assert await script_loads(redis_client) - before == 2 * sent
