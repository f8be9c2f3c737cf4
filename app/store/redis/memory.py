"""How full Redis is: ``used_memory`` against ``maxmemory``, from ``INFO memory``.

Under ``noeviction`` Redis refuses writes that may grow memory once
``used_memory`` passes ``maxmemory``. Leasehold reads the two numbers to refuse
*new* work well before that (the API's admission control), and to say so on
``/readyz`` and ``/metrics``. In a cluster every primary has its own budget:
the fullest primary is reported, since a queue on it is the first to be
refused (a create never knows ahead which node a new queue lands on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis

from app.store.redis.connection import AsyncRedis


@dataclass(frozen=True)
class MemoryReading:
    """One node's memory use; ``max_bytes`` 0 means no maxmemory is configured."""

    used_bytes: int
    max_bytes: int
    node: str = ""  # host:port of the fullest primary, in cluster mode

    @property
    def ratio(self) -> float | None:
        """``used / max``, or None without a maxmemory (nothing to compare with)."""
        return self.used_bytes / self.max_bytes if self.max_bytes else None

    def past(self, fraction: float) -> bool:
        """Whether use is at or past ``fraction`` of maxmemory (never without one)."""
        ratio = self.ratio
        return ratio is not None and ratio >= fraction


async def read_memory(client: AsyncRedis) -> MemoryReading:
    """Read ``INFO memory`` (of every primary, in a cluster); raises RedisError/OSError."""
    if isinstance(client, aioredis.RedisCluster):
        per_node = cast(
            dict[str, dict[str, Any]],
            await client.info("memory", target_nodes=aioredis.RedisCluster.PRIMARIES),
        )
        readings = [_reading(info, node) for node, info in per_node.items()]
        return max(readings, key=_fullness, default=MemoryReading(0, 0))
    return _reading(await client.info("memory"))


def _reading(info: dict[str, Any], node: str = "") -> MemoryReading:
    return MemoryReading(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)), node)


def _fullness(reading: MemoryReading) -> tuple[float, int]:
    return reading.ratio or 0.0, reading.used_bytes


def pressure_problems(reading: MemoryReading, high_water: float) -> list[str]:
    """What an operator should know about Redis memory, one line each (for /readyz)."""
    where = f" on {reading.node}" if reading.node else ""
    if not reading.max_bytes:
        return [
            f"maxmemory is not set{where}: Redis grows until the host kills it, and creates "
            "are never refused for memory; set maxmemory below the container's memory limit"
        ]
    used = f"{reading.used_bytes} of {reading.max_bytes} bytes"
    if reading.past(1.0):
        return [
            f"Redis is at maxmemory{where} ({used}): it refuses creates, claims and handler "
            "events; running runs still renew their leases and write their outcomes"
        ]
    if reading.past(high_water):
        return [
            f"Redis memory is past the high-water mark{where} ({used}, mark "
            f"{high_water:.0%}): creates are refused with 503 until memory frees"
        ]
    return []
