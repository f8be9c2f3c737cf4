"""The delayed zset's name as Lua derives it is the one store/keys.py builds."""

from __future__ import annotations

import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from tests.support.lua import snippet


async def test_lua_derives_the_delayed_key_as_store_keys_builds_it(
    redis_client: aioredis.Redis,
) -> None:
    keys = QueueKeys("lh", "mail")
    derived = await redis_client.eval(  # type: ignore[misc]
        snippet("return delayed_of(ARGV[1])", "keys"), 0, keys.run_prefix
    )
    assert derived == keys.delayed
