"""The namespace directory (``<prefix>:namespaces``) and a namespace's measured usage.

A namespace is a key space (:mod:`app.namespaces`): what isolates two tenants is that
their stores are built on different prefixes, not a check here. This room only says
which namespaces exist and what their quotas are, and measures what one holds. The
default namespace always exists; it has a record only once someone gave it quotas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from app.models.namespaces import Quotas
from app.namespaces import DEFAULT_NAMESPACE, namespace_prefix
from app.store.keys import GlobalKeys
from app.store.queues.store import QueueStore
from app.store.redis.connection import AsyncRedis


class NamespaceLimitReached(Exception):
    """``LEASEHOLD_MAX_NAMESPACES`` namespaces exist already."""


class NamespaceNotEmpty(Exception):
    """The namespace still has declared queues or schedules: delete those first."""


@dataclass(frozen=True)
class NamespaceRecord:
    """A declared namespace: its quotas and when it was made (None for `default`)."""

    name: str
    quotas: Quotas
    created_ms: int | None = None


@dataclass(frozen=True)
class Held:
    """What a namespace holds now, as its quotas count it."""

    live_runs: int
    stored_bytes: int
    queues: int
    schedules: int


class NamespaceStore:
    """Declare, read, list and delete namespaces under one deployment prefix."""

    def __init__(self, client: AsyncRedis, *, prefix: str, max_namespaces: int) -> None:
        self.client = client
        self.prefix = prefix
        self.key = GlobalKeys(prefix).namespaces
        self.max_namespaces = max_namespaces

    async def get(self, name: str) -> NamespaceRecord | None:
        """The namespace's record, or None when it does not exist."""
        raw = cast(str | None, await self.client.hget(self.key, name))
        if raw is None:
            default = name == DEFAULT_NAMESPACE
            return NamespaceRecord(DEFAULT_NAMESPACE, Quotas()) if default else None
        return _record(name, raw)

    async def list(self) -> list[NamespaceRecord]:
        """Every namespace, ``default`` first, then by name."""
        stored = cast(dict[str, str], await self.client.hgetall(self.key))
        records = {name: _record(name, raw) for name, raw in stored.items()}
        default = records.pop(DEFAULT_NAMESPACE, NamespaceRecord(DEFAULT_NAMESPACE, Quotas()))
        return [default, *(records[name] for name in sorted(records))]

    async def put(self, name: str, quotas: Quotas) -> bool:
        """Declare the namespace or replace its quotas; True when it is new.

        Raises :class:`NamespaceLimitReached` past ``max_namespaces`` (``default`` is
        never counted). Two racing first declarations may both pass the count: the bound
        is there against a runaway script, one over it changes nothing.
        """
        now_ms = await _now_ms(self.client)
        existing = cast(str | None, await self.client.hget(self.key, name))
        if existing is None and name != DEFAULT_NAMESPACE:
            count = int(await self.client.hlen(self.key))
            count -= int(bool(await self.client.hexists(self.key, DEFAULT_NAMESPACE)))
            if count >= self.max_namespaces:
                raise NamespaceLimitReached(self.max_namespaces)
        created_ms = json.loads(existing)["created_ms"] if existing else now_ms
        record = {"quotas": quotas.model_dump(exclude_none=True), "created_ms": created_ms}
        await self.client.hset(self.key, name, json.dumps(record, separators=(",", ":")))
        return existing is None

    async def delete(self, name: str, queues: QueueStore) -> bool:
        """Forget the namespace; False when it did not exist.

        Raises :class:`NamespaceNotEmpty` while it has declared queues or schedules (its
        keys would outlive it, unreachable). ``default`` loses only its quotas.
        """
        if name != DEFAULT_NAMESPACE:
            held = await self.held(name, queues, runs=False, stored=False)
            if held.queues or held.schedules:
                raise NamespaceNotEmpty(name)
        return bool(await self.client.hdel(self.key, name))

    async def held(
        self, name: str, queues: QueueStore, *, runs: bool = True, stored: bool = True
    ) -> Held:
        """What the namespace holds: live runs (with ``runs``) and stored bytes (with
        ``stored``) summed over its queues — bounded work per queue: counters, and a
        sampled size (the costlier part: a dozen MEMORY USAGE calls) —, queues and
        schedules; what is not measured is 0.

        ``queues`` is a queue store on the namespace's prefix.
        """
        keys = GlobalKeys(namespace_prefix(self.prefix, name))
        declared = await queues.declared()
        schedules = int(await self.client.hlen(keys.schedules))
        live = size = 0
        for queue in declared:
            if runs:
                depth = await queues.depth(queue)
                live += depth.ready + depth.delayed + depth.waiting + depth.leased + depth.parked
            if stored:
                size += await queues.memory_bytes(queue)
        return Held(live_runs=live, stored_bytes=size, queues=len(declared), schedules=schedules)


def _record(name: str, raw: str) -> NamespaceRecord:
    fields: dict[str, Any] = json.loads(raw)
    return NamespaceRecord(name, Quotas(**fields.get("quotas", {})), fields.get("created_ms"))


async def _now_ms(client: AsyncRedis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000
