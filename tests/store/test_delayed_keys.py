"""The delayed zset's name as Lua derives it is the one store/keys.py builds."""

from __future__ import annotations

import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from app.store.scripts import lua_dir


async def test_lua_derives_the_delayed_key_as_store_keys_builds_it(
    redis_client: aioredis.Redis,
) -> None:
    keys = QueueKeys("lh", "mail")
    lib = (lua_dir() / "includes" / "lib.lua").read_text()
    derived = await redis_client.eval(  # type: ignore[misc]
        lib + "\nreturn delayed_of(ARGV[1])", 0, keys.run_prefix
    )
    assert derived == keys.delayed
