"""Readiness facts about the Redis a process depends on, in every connection mode.

* Reachable: PING answered (in cluster mode by every primary, and the cluster
  says ``cluster_state:ok``: otherwise its commands fail with CLUSTERDOWN).
* Scripts loaded: on the node, or on every primary of a cluster.
* Eviction policy: ``noeviction`` expected on every primary; anything else is
  reported as a problem without failing readiness.
* Replica acknowledgements: with ``LEASEHOLD_REPLICA_ACKS=n``, a primary with
  fewer than ``n`` replicas is reported: every durable write to it would wait
  the whole timeout for acknowledgements that cannot come.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.models.read import RedisTopology
from app.redis_url import Mode
from app.store.lua.scripts import Scripts
from app.store.redis.connection import AsyncRedis, mode_of
from app.store.redis.topology import describe

EXPECTED_EVICTION_POLICY = "noeviction"


@dataclass(frozen=True)
class Readiness:
    """Whether Redis can be used safely, and what is wrong when it cannot."""

    redis_reachable: bool
    scripts_loaded: bool
    maxmemory_policy: str | None
    problems: list[str]
    mode: Mode = "single"
    topology: RedisTopology | None = None

    @property
    def ready(self) -> bool:
        """Reachable and scripts loaded; a wrong eviction policy is reported, not fatal."""
        return self.redis_reachable and self.scripts_loaded


async def check_readiness(client: AsyncRedis, scripts: Scripts) -> Readiness:
    """Ping Redis, make sure the scripts are loaded, read the eviction policy and topology.

    Lease keys must never be evicted; any policy but ``noeviction`` is reported as
    a problem so an operator sees it, without failing readiness (managed Redis
    services sometimes forbid changing it).
    """
    mode = mode_of(client)
    try:
        await _ping(client)
    except (RedisError, OSError) as exc:
        return Readiness(False, False, None, [f"redis unreachable: {exc}"], mode)
    problems: list[str] = []
    try:
        if not await scripts.loaded(client):
            await scripts.load_all(client)
        loaded = True
    except RedisError as exc:
        loaded = False
        problems.append(f"scripts not loaded: {exc}")
    policies = await _eviction_policies(client)
    problems.extend(_policy_problems(policies))
    topology = await _topology(client, problems)
    if topology is not None:
        problems.extend(_ack_problems(topology, scripts))
    policy = next(iter(sorted(set(policies.values()), key=_worst_first)), None)
    return Readiness(True, loaded, policy, problems, mode, topology)


async def _ping(client: AsyncRedis) -> None:
    """PING (every primary of a cluster), and a cluster must be able to serve every slot."""
    if not isinstance(client, aioredis.RedisCluster):
        await client.ping()
        return
    await client.ping(target_nodes=aioredis.RedisCluster.PRIMARIES)
    state = (await client.cluster_info()).get("cluster_state")
    if state != "ok":
        raise RedisError(f"cluster_state is {state}: some hash slots are not served")


async def _topology(client: AsyncRedis, problems: list[str]) -> RedisTopology | None:
    try:
        return await describe(client)
    except (RedisError, OSError) as exc:
        problems.append(f"topology unknown: {exc}")
        return None


def _worst_first(policy: str) -> tuple[bool, str]:
    return policy == EXPECTED_EVICTION_POLICY, policy


def _policy_problems(policies: dict[str, str]) -> list[str]:
    wrong = {
        node: policy for node, policy in policies.items() if policy != EXPECTED_EVICTION_POLICY
    }
    where = "" if len(policies) <= 1 else " on " + ", ".join(sorted(wrong))
    return [
        f"maxmemory-policy is {policy!r}{where}; {EXPECTED_EVICTION_POLICY!r} is required so "
        "Redis never evicts run records or leases"
        for policy in sorted(set(wrong.values()))
    ]


def _ack_problems(topology: RedisTopology, scripts: Scripts) -> list[str]:
    acks = scripts.replica_acks
    if acks is None:
        return []
    return [
        f"LEASEHOLD_REPLICA_ACKS={acks.replicas} but primary {node.address} has "
        f"{node.replicas} replica(s): its durable writes wait {acks.timeout_ms} ms each, "
        "then go on unacknowledged"
        for node in topology.nodes
        if node.role == "primary" and node.replicas is not None and node.replicas < acks.replicas
    ]


async def _eviction_policies(client: AsyncRedis) -> dict[str, str]:
    """``maxmemory-policy`` per primary (one entry outside a cluster); empty when hidden."""
    if isinstance(client, aioredis.RedisCluster):
        try:
            per_node = cast(
                dict[str, dict[str, str]],
                await client.config_get(
                    "maxmemory-policy", target_nodes=aioredis.RedisCluster.PRIMARIES
                ),
            )
        except RedisError:
            return {}
        return {
            node: str(config["maxmemory-policy"])
            for node, config in per_node.items()
            if "maxmemory-policy" in config
        }
    policy = await _eviction_policy(client)
    return {"": policy} if policy is not None else {}


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
