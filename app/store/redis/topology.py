"""What a Redis client is connected to: the mode, the nodes, who is primary.

For ``/readyz`` and for operators, never for routing: redis-py routes cluster
commands by its own slot map and asks the sentinels for the primary on every new
connection. The picture is as of the call, and a failover can change it the
next moment.

* **single**: the one node, its role and how many replicas it has;
* **cluster**: every primary with the hash slot ranges it serves and its
  replicas, from redis-py's slot map (refreshed on MOVED or a failed node);
* **sentinel**: the service, the sentinels, the primary they name now and its
  replicas.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import redis.asyncio as aioredis
import redis.asyncio.sentinel as async_sentinel
from redis.asyncio.cluster import ClusterNode

from app.models.read import RedisNode, RedisTopology
from app.store.redis.connection import AsyncRedis, mode_of


async def describe(client: AsyncRedis) -> RedisTopology:
    """The deployment behind ``client``; raises RedisError/OSError when it cannot be asked."""
    if isinstance(client, aioredis.RedisCluster):
        return await _cluster(client)
    pool = client.connection_pool
    if isinstance(pool, async_sentinel.SentinelConnectionPool):
        return await _sentinel(client, pool)
    return await _single(client)


def address(host: object, port: object) -> str:
    """``host:port`` as Redis writes it."""
    return f"{host}:{port}"


def _replicas(info: dict[str, Any]) -> int:
    return int(info.get("connected_slaves", 0))


async def _single(client: aioredis.Redis) -> RedisTopology:
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or address(kwargs.get("host"), kwargs.get("port"))
    info = await client.info("replication")
    role: Literal["primary", "replica"] = "primary" if info.get("role") == "master" else "replica"
    node = RedisNode(address=where, role=role, replicas=_replicas(info))
    return RedisTopology(mode=mode_of(client), primary=where, nodes=[node])


async def _sentinel(
    client: aioredis.Redis, pool: async_sentinel.SentinelConnectionPool
) -> RedisTopology:
    manager = pool.sentinel_manager
    primary = address(*await manager.discover_master(pool.service_name))
    info = await client.info("replication")
    nodes = [RedisNode(address=primary, role="primary", replicas=_replicas(info))]
    for host, port in await manager.discover_slaves(pool.service_name):
        nodes.append(RedisNode(address=address(host, port), role="replica"))
    sentinels = [
        address(
            s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"]
        )
        for s in manager.sentinels
    ]
    return RedisTopology(
        mode="sentinel",
        primary=primary,
        service_name=pool.service_name,
        sentinels=sentinels,
        nodes=nodes,
    )


async def _cluster(client: aioredis.RedisCluster) -> RedisTopology:
    await client.initialize()  # builds the slot map if no command has yet
    infos = cast(
        dict[str, dict[str, Any]],
        await client.info("replication", target_nodes=aioredis.RedisCluster.PRIMARIES),
    )
    ranges, replicas = _slot_map(client.nodes_manager.slots_cache)
    nodes = [
        RedisNode(
            address=name,
            role="primary",
            slots=[f"{start}-{end}" for start, end in spans],
            replicas=_replicas(infos.get(name, {})),
        )
        for name, spans in sorted(ranges.items())
    ]
    nodes.extend(RedisNode(address=name, role="replica") for name in sorted(replicas))
    return RedisTopology(mode="cluster", nodes=nodes)


def _slot_map(
    slots_cache: dict[int, list[ClusterNode]],
) -> tuple[dict[str, list[tuple[int, int]]], set[str]]:
    """Slot ranges per primary (``[(start, end)]``) and the set of replica names."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    replicas: set[str] = set()
    for slot in sorted(slots_cache):
        primary, *others = slots_cache[slot]
        replicas.update(node.name for node in others)
        spans = ranges.setdefault(primary.name, [])
        if spans and spans[-1][1] == slot - 1:
            spans[-1] = (spans[-1][0], slot)
        else:
            spans.append((slot, slot))
    return ranges, replicas
