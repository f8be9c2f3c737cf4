"""Declared queues: which queues exist, and what each one holds right now.

A queue exists because configuration or an operator declared it, never because a
client named it. The declared set is the Redis set ``<prefix>:queues``:

* every API and worker process adds the queues of its ``LEASEHOLD_QUEUES`` (its
  configuration) the first time it needs them;
* ``PUT /queues/{name}`` adds one more, through the ``declare_queue`` script, which
  refuses past ``LEASEHOLD_MAX_QUEUES``;
* ``DELETE /queues/{name}`` removes one that holds no runs, through the
  ``undeclare_queue`` script (a configured one is refused: it would come back);
* creating a run never adds to it: a run on an undeclared queue is refused.

:func:`declared_queues` is the one reading of that set; listing runs, ``/metrics``,
``/activity`` and the reconciler all use it, so they agree and cost O(declared
queues). Since a queue can be undeclared, only a process's configured queues are
taken on trust; any other is looked up (one SISMEMBER) on every create.

A create races an undeclare: the create's check and its script are two steps, so
the queue may leave the set between them. :meth:`QueueStore.keep_declared`, run
after every create, closes that window: the undeclare removed the queue only while
it was empty, so a run created after it finds the queue missing and declares it
again (past ``LEASEHOLD_MAX_QUEUES`` if need be: the run has to stay visible). The
create wins; no run is ever left on an undeclared queue for longer than that step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import redis.asyncio as aioredis

from app.errors import QueueLimitReached, QueueNotDeclared, QueueNotEmpty
from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import ScriptCode, Scripts
from app.store.queues.bindings import DECLARE_QUEUE, UNDECLARE_QUEUE, DeclareArgs, UndeclareArgs
from app.store.redis.connection import AsyncRedis

if TYPE_CHECKING:
    from app.models.read import QueueInfo
    from app.settings import Settings

# runs whose memory is measured to estimate a queue's (newest first)
MEMORY_SAMPLE_RUNS = 3
# what undeclare_queue counts, in its order: the names a 409 reports
HELD_INDEXES = ("ready", "delayed", "leased", "parked", "unclaimed", "stored")


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
    delayed: int  # retry backoff, delayed starts and rate holds: not the timed waits below
    leased: int
    parked: int
    oldest_queued_age_s: float
    stored: int = 0  # run records the queue keeps (the listing index), whatever their status
    waiting: int = 0  # parked on a durable sleep, signal or join (the `waiting` index)


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
        self._announced = False

    @classmethod
    def for_settings(cls, client: AsyncRedis, scripts: Scripts, settings: Settings) -> QueueStore:
        """The store of ``settings``: their prefix, configured queues and ``max_queues``."""
        return cls(
            client,
            scripts=scripts,
            prefix=settings.data_prefix,
            configured=settings.queues,
            max_queues=settings.max_queues,
        )

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)

    async def announce_configured(self) -> None:
        """Declare this process's configured queues (once; not bounded by MAX_QUEUES).

        Configuration is the operator's word, so it is never refused; only
        ``PUT /queues`` is bounded.
        """
        if not self._announced:
            if self.configured:  # none in a namespace this process does not configure
                await self.client.sadd(GlobalKeys(self.prefix).queues, *self.configured)
            self._announced = True

    async def declared(self) -> list[str]:
        """Every declared queue, this process's configured ones included; writes nothing."""
        return await declared_queues(self.client, self.prefix, self.configured)

    async def is_declared(self, queue: str) -> bool:
        """Whether runs may be created on ``queue``; one SISMEMBER unless it is configured.

        Never cached: another process may have undeclared it since.
        """
        if queue in self.configured:
            return True
        return bool(await self.client.sismember(GlobalKeys(self.prefix).queues, queue))

    async def undeclared(self, queues: list[str]) -> list[str]:
        """Those of ``queues`` that are not declared, in order; one SMISMEMBER for the others."""
        await self.announce_configured()
        unseen = [queue for queue in queues if queue not in self.configured]
        if not unseen:
            return []
        flags = cast(
            list[int], await self.client.smismember(GlobalKeys(self.prefix).queues, unseen)
        )
        return [queue for queue, known in zip(unseen, flags, strict=True) if not known]

    async def keep_declared(self, queues: Iterable[str]) -> None:
        """After a create: declare again any of ``queues`` an undeclare removed meanwhile.

        Why: the create checked the queue, then wrote its run; an undeclare between
        the two saw the queue empty and removed it. The run wins: the queue is put
        back (unbounded, like configuration), so no run sits on an undeclared queue.
        """
        names = sorted(set(queues) - set(self.configured))
        if not names:
            return
        key = GlobalKeys(self.prefix).queues
        flags = cast(list[int], await self.client.smismember(key, names))
        lost = [queue for queue, known in zip(names, flags, strict=True) if not known]
        if lost:
            await self.client.sadd(key, *lost)

    async def require(self, queue: str) -> None:
        """Raise :class:`QueueNotDeclared` (naming the declared ones) unless it is declared.

        A refused queue writes nothing; the first run on a configured queue announces
        this process's configuration, so every other reader of the set sees it.
        """
        if not await self.is_declared(queue):
            raise QueueNotDeclared(queue, await self.declared())
        if queue in self.configured:
            await self.announce_configured()

    async def declare(self, queue: str, *, max_queues: int | None = None) -> bool:
        """Declare ``queue``; True when it is new, False when it was declared already.

        Raises :class:`QueueLimitReached` when ``max_queues`` (default: the store's)
        are declared; the name must already match the queue-name pattern (the API
        checks it).
        """
        await self.announce_configured()
        bound = self.max_queues if max_queues is None else max_queues
        args = DeclareArgs(queue, bound)
        reply = await DECLARE_QUEUE.send(self.scripts, self.client, self.keys(queue), args)
        if reply.code == ScriptCode.CONFLICT:
            raise QueueLimitReached(queue, bound)
        return bool(reply.code == ScriptCode.OK)

    async def undeclare(self, queue: str) -> None:
        """Undeclare an empty queue: it frees a ``LEASEHOLD_MAX_QUEUES`` slot.

        Raises :class:`QueueNotDeclared` for a name nobody declared and
        :class:`QueueNotEmpty` (with what it holds) for a queue with runs in any
        index, or one in this process's ``LEASEHOLD_QUEUES`` (it would be declared
        again at the next start). Atomic through ``undeclare_queue``; on a cluster
        the declared set lives in another slot, so it is count, remove, count again
        (and put back if a run appeared: the create's :meth:`keep_declared` covers
        the rest of that window).
        """
        if queue in self.configured:
            raise QueueNotEmpty(
                queue,
                "it is in this API's LEASEHOLD_QUEUES and would be declared again at "
                "start; remove it from the configuration first",
            )
        if isinstance(self.client, aioredis.RedisCluster):
            code, counts = await self._undeclare_across_slots(queue, GlobalKeys(self.prefix).queues)
        else:
            reply = await UNDECLARE_QUEUE.send(
                self.scripts, self.client, self.keys(queue), UndeclareArgs(queue)
            )
            code, counts = reply.code, reply.counts
        if code == ScriptCode.NOT_FOUND:
            raise QueueNotDeclared(queue, await self.declared())
        if code == ScriptCode.CONFLICT:
            holds = dict(zip(HELD_INDEXES, (int(count) for count in counts), strict=True))
            shown = ", ".join(f"{count} {name}" for name, count in holds.items() if count)
            raise QueueNotEmpty(
                queue, f"it still holds runs ({shown}); cancel or delete them first", holds
            )

    async def _undeclare_across_slots(self, queue: str, key: str) -> tuple[str, list[int]]:
        """The script's steps where it cannot run (a cluster): counts, SREM, counts again."""
        if not await self.client.sismember(key, queue):
            return ScriptCode.NOT_FOUND, []
        counts = await self._held(queue)
        if any(counts):
            return ScriptCode.CONFLICT, counts
        await self.client.srem(key, queue)
        counts = await self._held(queue)
        if any(counts):  # a create landed between the two counts: it keeps its queue
            await self.client.sadd(key, queue)
            return ScriptCode.CONFLICT, counts
        return ScriptCode.OK, counts

    async def _held(self, queue: str) -> list[int]:
        keys = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(keys.ready)
        for index in (keys.delayed, keys.leases, keys.parked, keys.unclaimed, keys.runs):
            pipe.zcard(index)
        return [int(count) for count in await pipe.execute()]

    async def depth(self, queue: str) -> QueueDepth:
        """How many runs of a queue are ready, delayed, waiting, leased and parked; the head's age.

        ``ready`` counts the runs in the queue's lanes (the scripts keep the counter);
        the head is the first run of the lane at the head of the ring. Parked runs are
        counted by the ``parked`` index the scripts keep, durable waits by the
        ``waiting`` index (runs parked before either existed are in neither; a timed wait
        of that age still counts as delayed). A timed wait sits in ``delayed`` too, with a
        finite score in ``waiting``: ``delayed`` is the rest (ZCARD minus that ZCOUNT),
        so each count is O(1) or O(log n) whatever the queue holds.
        """
        keys = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(keys.queued)
        pipe.zcard(keys.delayed)
        pipe.zcard(keys.leases)
        pipe.zcard(keys.parked)
        pipe.lindex(keys.ready, 0)
        pipe.zcard(keys.runs)
        pipe.zcard(keys.waiting)
        pipe.zcount(keys.waiting, "-inf", "(+inf")
        ready, delayed, leased, parked, lane, stored, waiting, timed = await pipe.execute()
        oldest_age_s = 0.0
        head = cast(list[str], await self.client.zrange(keys.lane(lane), 0, 0) if lane else [])
        if head:
            created = await self.client.hget(keys.run(head[0]), "created_at")
            if created:
                # not in the pipeline: TIME has no key, and a cluster pipeline refuses it
                seconds, micros = await self.client.time()
                oldest_age_s = max(0.0, seconds + micros / 1e6 - int(created) / 1000)
        return QueueDepth(
            ready=max(0, int(ready or 0)),
            delayed=max(0, int(delayed) - int(timed)),
            leased=int(leased),
            parked=int(parked),
            oldest_queued_age_s=oldest_age_s,
            stored=int(stored),
            waiting=int(waiting),
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
        index = [keys.ready, keys.delayed, keys.leases, keys.runs, keys.parked, keys.waiting]
        index.append(keys.activity)
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
        from app.models.read import QueueInfo  # the API's: a worker declares, never describes

        depth = await self.depth(queue)
        return QueueInfo(
            name=queue,
            configured=queue in self.configured,
            ready=depth.ready,
            running=depth.leased,
            delayed=depth.delayed,
            waiting=depth.waiting,
            parked=depth.parked,
            oldest_queued_age_s=round(depth.oldest_queued_age_s, 3),
            memory_bytes=await self.memory_bytes(queue),
        )
