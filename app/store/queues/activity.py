"""Reads the per-queue activity streams that live views follow.

Only the Lua transitions write them: ``emit`` in ``scripts/lua/includes/events.lua``
adds one entry per lifecycle event (created, claimed, requeued, orphaned, ...) in
the same script as the change, so an entry never describes a change that did not
happen. Handler events (token, progress, wait, verdict) are not in it: a busy run
would drown the others, and a run's own stream already has them.

A stream is trimmed to about :data:`ACTIVITY_MAXLEN` entries (``MAXLEN ~``), so it
says what changed recently, not everything that ever did: a follower that fell
further behind than that reloads the list instead (see :meth:`ActivityStore.trimmed`).
"""

from __future__ import annotations

from typing import cast

from app.models import RunStatus, event_id_order
from app.models.read import ActivityEntry
from app.store.codec import ms_to_datetime
from app.store.keys import QueueKeys
from app.store.queues.store import declared_queues
from app.store.redis.connection import AsyncRedis

# keep in step with ACTIVITY_MAXLEN in scripts/lua/includes/events.lua
ACTIVITY_MAXLEN = 1000

Entries = list[tuple[str, dict[str, str]]]


def entry_from_fields(queue: str, entry_id: str, fields: dict[str, str]) -> ActivityEntry:
    """An activity stream entry as the model clients see."""
    ts = ms_to_datetime(fields["ts"])
    assert ts is not None
    return ActivityEntry(
        id=entry_id,
        queue=queue,
        run_id=fields["run_id"],
        event_id=fields["event_id"],
        type=fields["type"],
        status=RunStatus(fields["status"]) if fields.get("status") else None,
        fence=int(fields["fence"]),
        ts=ts,
    )


class ActivityStore:
    """Holds a Redis client and reads activity streams from it."""

    def __init__(self, client: AsyncRedis, *, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def key(self, queue: str) -> str:
        """The key of a queue's activity stream."""
        return QueueKeys(self.prefix, queue).activity

    async def queues(self) -> list[str]:
        """Every declared queue (:func:`app.store.queues.store.declared_queues`)."""
        return await declared_queues(self.client, self.prefix)

    async def read(self, queue: str, *, after: str, count: int) -> list[ActivityEntry]:
        """Up to ``count`` entries strictly after stream id ``after``, oldest first."""
        entries = cast(Entries, await self.client.xrange(self.key(queue), f"({after}", "+", count))
        return [entry_from_fields(queue, entry_id, fields) for entry_id, fields in entries]

    async def newest(self, queue: str) -> str:
        """The id of the newest entry, or ``0-0`` for an empty stream: "now", as a position."""
        entries = cast(Entries, await self.client.xrevrange(self.key(queue), "+", "-", count=1))
        return entries[0][0] if entries else "0-0"

    async def trimmed(self, queue: str, *, after: str) -> bool:
        """Whether entries after ``after`` may have been trimmed away.

        Trimming only happens to a stream at its cap, and removes its oldest
        entries: so only a position older than the oldest retained entry of a full
        stream can have lost something.
        """
        key = self.key(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.xlen(key)
        pipe.xrange(key, "-", "+", count=1)
        length, oldest = cast(tuple[int, Entries], await pipe.execute())
        if length < ACTIVITY_MAXLEN or not oldest:
            return False
        return event_id_order(after) < event_id_order(oldest[0][0])
