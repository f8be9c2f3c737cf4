"""Readiness facts about the Redis a process depends on."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.store.scripts import Scripts

EXPECTED_EVICTION_POLICY = "noeviction"


@dataclass(frozen=True)
class Readiness:
    """Whether Redis can be used safely, and what is wrong when it cannot."""

    redis_reachable: bool
    scripts_loaded: bool
    maxmemory_policy: str | None
    problems: list[str]

    @property
    def ready(self) -> bool:
        """Reachable and scripts loaded; a wrong eviction policy is reported, not fatal."""
        return self.redis_reachable and self.scripts_loaded


async def check_readiness(client: aioredis.Redis, scripts: Scripts) -> Readiness:
    """Ping Redis, make sure the scripts are loaded, and read the eviction policy.

    Lease keys must never be evicted; any policy but ``noeviction`` is reported as
    a problem so an operator sees it, without failing readiness (managed Redis
    services sometimes forbid changing it).
    """
    problems: list[str] = []
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        return Readiness(False, False, None, [f"redis unreachable: {exc}"])
    try:
        if not await scripts.loaded(client):
            await scripts.load_all(client)
        loaded = True
    except RedisError as exc:
        loaded = False
        problems.append(f"scripts not loaded: {exc}")
    policy = await _eviction_policy(client)
    if policy is not None and policy != EXPECTED_EVICTION_POLICY:
        problems.append(
            f"maxmemory-policy is {policy!r}; {EXPECTED_EVICTION_POLICY!r} is required so "
            "Redis never evicts run records or leases"
        )
    return Readiness(True, loaded, policy, problems)


async def _eviction_policy(client: aioredis.Redis) -> str | None:
    try:
        config = await client.config_get("maxmemory-policy")
    except RedisError:
        # managed services may disable CONFIG; fall back to INFO
        try:
            info = await client.info("memory")
        except RedisError:
            return None
        value = info.get("maxmemory_policy")
        return str(value) if value is not None else None
    value = config.get("maxmemory-policy")
    return str(value) if value is not None else None
