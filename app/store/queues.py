"""Declared queues: which queues exist, and what each one holds right now.

A queue exists because configuration or an operator declared it, never because a
client named it. The declared set is the Redis set ``<prefix>:queues``:

* every API and worker process adds the queues of its ``LEASEHOLD_QUEUES`` (its
  configuration) the first time it needs them;
* ``PUT /queues/{name}`` adds one more, through the ``declare_queue`` script, which
  refuses past ``LEASEHOLD_MAX_QUEUES``;
* creating a run never adds to it: a run on an undeclared queue is refused.

:func:`declared_queues` is the one reading of that set; listing runs, ``/metrics``,
``/activity`` and the reconciler all use it, so they agree and cost O(declared
queues). A queue is never undeclared (there is no DELETE), so a process may cache
the names it has seen declared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from app.errors import QueueLimitReached, QueueNotDeclared
from app.models import QueueInfo
from app.store.connection import AsyncRedis
from app.store.keys import GlobalKeys, QueueKeys
from app.store.scripts import ScriptCode, Scripts

# runs whose memory is measured to estimate a queue's (newest first)
MEMORY_SAMPLE_RUNS = 3


async def declared_queues(
    client: AsyncRedis, prefix: str, configured: Iterable[str] = ()
) -> list[str]:
    """Every declared queue, sorted: the one definition of "which queues exist".

    ``configured``: the caller's own LEASEHOLD_QUEUES, declared even before the
    process has announced them (reading never writes).
    """
    stored = cast(set[str], await client.smembers(GlobalKeys(prefix).queues))
    return sorted(stored | set(configured))


@dataclass(frozen=True)
class QueueDepth:
    """A queue's backlog at one moment (Redis clock for the age)."""

    ready: int
    delayed: int
    leased: int
    parked: int
    oldest_queued_age_s: float
    stored: int = 0  # run records the queue keeps (the listing index), whatever their status


class QueueStore:
    """Holds a Redis client; declares queues and reads what each one holds."""

    def __init__(
        self,
        client: AsyncRedis,
        *,
        scripts: Scripts,
        prefix: str,
        configured: Sequence[str],
        max_queues: int,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.configured = tuple(configured)
        self.max_queues = max_queues
        self._seen: set[str] = set()
        self._announced = False

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)

    async def announce_configured(self) -> None:
        """Declare this process's configured queues (once; not bounded by MAX_QUEUES).

        Configuration is the operator's word, so it is never refused; only
        ``PUT /queues`` is bounded.
        """
        if not self._announced:
            await self.client.sadd(GlobalKeys(self.prefix).queues, *self.configured)
            self._seen.update(self.configured)
            self._announced = True

    async def declared(self) -> list[str]:
        """Every declared queue, this process's configured ones included; writes nothing."""
        return await declared_queues(self.client, self.prefix, self.configured)

    async def is_declared(self, queue: str) -> bool:
        """Whether runs may be created on ``queue``; one SISMEMBER until it is seen."""
        if queue in self.configured or queue in self._seen:
            return True
        if await self.client.sismember(GlobalKeys(self.prefix).queues, queue):
            self._seen.add(queue)
            return True
        return False

    async def undeclared(self, queues: list[str]) -> list[str]:
        """Those of ``queues`` that are not declared, in order; one SMISMEMBER for the unseen."""
        await self.announce_configured()
        unseen = [queue for queue in queues if queue not in self._seen]
        if not unseen:
            return []
        flags = cast(
            list[int], await self.client.smismember(GlobalKeys(self.prefix).queues, unseen)
        )
        self._seen.update(queue for queue, known in zip(unseen, flags, strict=True) if known)
        return [queue for queue, known in zip(unseen, flags, strict=True) if not known]

    async def require(self, queue: str) -> None:
        """Raise :class:`QueueNotDeclared` (naming the declared ones) unless it is declared.

        A refused queue writes nothing; the first run on a configured queue announces
        this process's configuration, so every other reader of the set sees it.
        """
        if not await self.is_declared(queue):
            raise QueueNotDeclared(queue, await self.declared())
        if queue in self.configured:
            await self.announce_configured()

    async def declare(self, queue: str) -> bool:
        """Declare ``queue``; True when it is new, False when it was declared already.

        Raises :class:`QueueLimitReached` when ``max_queues`` are declared; the name
        must already match the queue-name pattern (the API checks it).
        """
        await self.announce_configured()
        code, _count = await self.scripts.call(
            self.client, "declare_queue", [GlobalKeys(self.prefix).queues], [queue, self.max_queues]
        )
        if code == ScriptCode.CONFLICT:
            raise QueueLimitReached(queue, self.max_queues)
        self._seen.add(queue)
        return bool(code == ScriptCode.OK)

    async def depth(self, queue: str) -> QueueDepth:
        """How many runs of a queue are ready, delayed, leased and parked, and the head's age.

        The ready list may still hold ids of runs cancelled while queued (claims skip
        them lazily), so ``ready`` can over-count by those. Parked runs are counted
        by the ``parked`` index the scripts keep (runs parked before it existed are
        not in it).
        """
        keys = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(keys.ready)
        pipe.zcard(keys.delayed)
        pipe.zcard(keys.leases)
        pipe.zcard(keys.parked)
        pipe.lindex(keys.ready, 0)
        pipe.zcard(keys.runs)
        ready, delayed, leased, parked, head, stored = await pipe.execute()
        oldest_age_s = 0.0
        if head:
            created = await self.client.hget(keys.run(head), "created_at")
            if created:
                # not in the pipeline: TIME has no key, and a cluster pipeline refuses it
                seconds, micros = await self.client.time()
                oldest_age_s = max(0.0, seconds + micros / 1e6 - int(created) / 1000)
        return QueueDepth(
            ready=int(ready),
            delayed=int(delayed),
            leased=int(leased),
            parked=int(parked),
            oldest_queued_age_s=oldest_age_s,
            stored=int(stored),
        )

    async def memory_bytes(self, queue: str) -> int:
        """An estimate of the queue's memory, in bounded work whatever its size.

        ``MEMORY USAGE`` (which itself samples large keys) of the queue's index keys,
        plus the newest ``MEMORY_SAMPLE_RUNS`` runs' record and event stream, scaled
        to the number of runs the queue lists.
        """
        keys = self.keys(queue)
        listed = int(await self.client.zcard(keys.runs))
        sample = cast(list[str], await self.client.zrevrange(keys.runs, 0, MEMORY_SAMPLE_RUNS - 1))
        index = [keys.ready, keys.delayed, keys.leases, keys.runs, keys.parked, keys.activity]
        runs = [key for run_id in sample for key in (keys.run(run_id), keys.events(run_id))]
        usages = await asyncio.gather(*(self.client.memory_usage(key) for key in index + runs))
        index_bytes = sum(int(usage or 0) for usage in usages[: len(index)])
        sampled_bytes = sum(int(usage or 0) for usage in usages[len(index) :])
        per_run = sampled_bytes / len(sample) if sample else 0.0
        return index_bytes + round(per_run * listed)

    async def info(self, queue: str) -> QueueInfo:
        """What one declared queue holds now; raises :class:`QueueNotDeclared` otherwise."""
        await self.require(queue)
        return await self._describe(queue)

    async def infos(self) -> list[QueueInfo]:
        """Every declared queue and what it holds: a few round trips per queue, in turn."""
        return [await self._describe(queue) for queue in await self.declared()]

    async def _describe(self, queue: str) -> QueueInfo:
        depth = await self.depth(queue)
        return QueueInfo(
            name=queue,
            configured=queue in self.configured,
            ready=depth.ready,
            running=depth.leased,
            delayed=depth.delayed,
            parked=depth.parked,
            oldest_queued_age_s=round(depth.oldest_queued_age_s, 3),
            memory_bytes=await self.memory_bytes(queue),
        )
