"""Reads of run trees: a parent's children index, its children's summaries, and stream rounds.

The writes (a spawn, the index's ZADD, a child's outcome) belong to
:mod:`app.store.family.children`. This module only reads, and reads each key in its own
slot: a parent's children index lives in the parent's queue's slot, a child's
record and events in the child's (its id names its queue), so nothing here
needs a cross-slot script and every call is Redis Cluster safe (pipelines are
non-transactional; redis-py sends each command to its own node).

The index is a zset, child id -> the Redis ms at which its entry was written.
Listing it oldest first, ties by id, gives every child a stable place
(:class:`Position`) that later spawns never move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis

from app.errors import RunNotFound
from app.models import Run, RunEvent
from app.models.read import RunPage
from app.store.codec import SUMMARY_FIELDS, event_from_entry, run_from_hash
from app.store.context import Store
from app.store.keys import queue_of
from app.store.runs.positions import Position


@dataclass(frozen=True)
class StreamRead:
    """One run's part of a stream round: events from ``start`` (an XRANGE bound), ``count`` max.

    ``oldest``: also read the stream's oldest retained entry, to tell trimmed history.
    """

    run_id: str
    start: str
    count: int
    oldest: bool = False


@dataclass(frozen=True)
class IndexRead:
    """One parent's part of a stream round: index entries scored ``min_score`` or more."""

    parent_id: str
    min_score: int
    count: int


@dataclass(frozen=True)
class StreamChunk:
    """What a :class:`StreamRead` found: the events, the oldest retained one if asked, and
    the run's status read just before them (None: no record, deleted or expired).

    A terminal status read before the events means the terminal event is already in
    the stream (one script writes both): if the read did not reach it, it lies
    before where the read started.
    """

    events: list[RunEvent]
    oldest: RunEvent | None
    status: str | None


@dataclass(frozen=True)
class Round:
    """The replies of one stream round, in the order of the reads."""

    chunks: list[StreamChunk]
    entries: list[list[Position]]


class TreeStore(Store):
    """Reads a run's family: its children, page by page, and the tree stream's rounds."""

    async def children_page(
        self, parent_id: str, *, limit: int, cursor: str | None = None
    ) -> RunPage:
        """The parent's children oldest first, as summaries; ``next_cursor`` None at the end.

        Raises :class:`RunNotFound` when the parent's record does not exist (a parent
        without children is an empty page), :class:`InvalidCursor` for a cursor this
        store did not make. A child whose record expired before its parent's is left
        out; the page still moves on.
        """
        after = Position.decode(cursor) if cursor else None
        keys = self.keys(_queue(parent_id))
        if not await self.client.exists(keys.run(parent_id)):
            raise RunNotFound(parent_id)
        positions = await self.children_after(parent_id, after, limit + 1)
        more = len(positions) > limit
        positions = positions[:limit]
        runs = await self.summaries([position.run_id for position in positions])
        items = [run for run in runs if run is not None]
        next_cursor = positions[-1].encode() if more and positions else None
        return RunPage(items=items, next_cursor=next_cursor)

    async def children_after(
        self, parent_id: str, after: Position | None, count: int
    ) -> list[Position]:
        """Up to ``count`` index entries past ``after``, oldest first."""
        key = self.keys(_queue(parent_id)).children(parent_id)
        low: int | str = after.score if after else "-inf"
        found: list[Position] = []
        offset = 0
        while len(found) < count:
            # entries at ``after``'s own score come back again: skip them, read on
            want = count - len(found) + 1
            batch = cast(
                list[tuple[str, float]],
                await self.client.zrangebyscore(
                    key, low, "+inf", start=offset, num=want, withscores=True
                ),
            )
            found.extend(p for p in _positions(batch) if after is None or p > after)
            if len(batch) < want:
                break
            offset += len(batch)
        return found[:count]

    async def summaries(self, run_ids: Sequence[str]) -> list[Run | None]:
        """Each run's summary (no input, output or metadata), None where it is gone.

        One pipeline: each HMGET goes to the run's own slot.
        """
        if not run_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(self.keys(_queue(run_id)).run(run_id), list(SUMMARY_FIELDS))
        replies = cast(list[list[str | None]], await pipe.execute())
        runs: list[Run | None] = []
        for values in replies:
            fields = {k: v for k, v in zip(SUMMARY_FIELDS, values, strict=True) if v is not None}
            runs.append(run_from_hash(fields) if "id" in fields else None)
        return runs

    async def server_ms(self) -> int:
        """The Redis clock in ms; in a cluster the earliest of every primary's.

        Why the earliest: the tree stream takes it as the horizon below which every
        stream it reads next is complete, and a node whose clock runs behind may
        still write ids down to its own time.
        """
        if isinstance(self.client, aioredis.RedisCluster):
            per_node = cast(
                dict[str, tuple[int, int]],
                await self.client.time(target_nodes=aioredis.RedisCluster.PRIMARIES),
            )
            return min(_ms(reply) for reply in per_node.values())
        return _ms(await self.client.time())

    async def read_round(
        self, streams: Sequence[StreamRead], indexes: Sequence[IndexRead]
    ) -> Round:
        """Every read of one tree-stream round, in one pipeline (each key to its own node).

        A run's status and events are read before its children index: they share a
        slot, so when the run had ended, the index read saw every child it will ever
        have.
        """
        pipe = self.client.pipeline(transaction=False)
        for read in streams:
            keys = self.keys(_queue(read.run_id))
            pipe.hget(keys.run(read.run_id), "status")  # before the events: see StreamChunk
            pipe.xrange(keys.events(read.run_id), read.start, "+", count=read.count)
            if read.oldest:
                pipe.xrange(keys.events(read.run_id), "-", "+", count=1)
        for index in indexes:
            key = self.keys(_queue(index.parent_id)).children(index.parent_id)
            pipe.zrangebyscore(
                key, index.min_score, "+inf", start=0, num=index.count, withscores=True
            )
        replies = iter(await pipe.execute())
        chunks = []
        for read in streams:
            status = cast(str | None, next(replies))
            entries = cast(list[tuple[str, dict[str, str]]], next(replies))
            oldest = cast(list[tuple[str, dict[str, str]]], next(replies)) if read.oldest else []
            chunks.append(
                StreamChunk(
                    events=[event_from_entry(read.run_id, i, f) for i, f in entries],
                    oldest=event_from_entry(read.run_id, *oldest[0]) if oldest else None,
                    status=status,
                )
            )
        found = [_positions(cast(list[tuple[str, float]], next(replies))) for _ in indexes]
        return Round(chunks=chunks, entries=found)


def _positions(batch: list[tuple[str, float]]) -> list[Position]:
    return [Position(int(score), member) for member, score in batch]


def _ms(reply: tuple[int, int]) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _queue(run_id: str) -> str:
    queue = queue_of(run_id)
    if queue is None:
        raise RunNotFound(run_id)
    return queue
