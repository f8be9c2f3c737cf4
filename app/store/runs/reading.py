"""Reading a run and its events: from the start, from a position, and where they begin."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from redis.exceptions import ResponseError

from app.errors import RunNotFound
from app.models import Run, RunEvent
from app.store.codec import (
    event_from_entry,
    run_from_hash,
)
from app.store.context import Store
from app.store.keys import queue_of_run
from app.store.runs.bindings import (
    READ_EVENTS,
    ReadEventsArgs,
    ReadEventsReply,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeedRead:
    """One read of a run's stream by a live feed (:meth:`RunStore.read_new_events`)."""

    events: list[RunEvent]
    # entries written after the feed's position and trimmed before it read them;
    # -1 when some may have been but Redis (before 7.0) does not count them
    missing: int


def _feed_read(run_id: str, reply: ReadEventsReply) -> FeedRead:
    """The events of a ``read_events`` reply (entries with flat field lists), and the gap."""
    events = [
        event_from_entry(run_id, entry_id, dict(zip(fields[::2], fields[1::2], strict=True)))
        for entry_id, fields in reply.entries
    ]
    return FeedRead(events, reply.missing)


class RunReading(Store):
    """Reads a run, and its event stream from the start or a position."""

    async def get(self, run_id: str) -> Run:
        """The run with this id; raises :class:`RunNotFound` (also for malformed ids)."""
        fields = cast(
            dict[str, str], await self.client.hgetall(self.keys(queue_of_run(run_id)).run(run_id))
        )
        if not fields:
            raise RunNotFound(run_id)
        return run_from_hash(fields)

    async def read_events(
        self, run_id: str, *, after: str | None = None, count: int = 1000
    ) -> list[RunEvent]:
        """Up to ``count`` events of a run, oldest first, strictly after stream id ``after``."""
        start = f"({after}" if after else "-"
        entries = cast(
            list[tuple[str, dict[str, str]]],
            await self.client.xrange(
                self.keys(queue_of_run(run_id)).events(run_id), start, "+", count=count
            ),
        )
        return [event_from_entry(run_id, entry_id, fields) for entry_id, fields in entries]

    def events_key(self, run_id: str) -> str:
        """The key of a run's event stream; raises :class:`RunNotFound` for a malformed id."""
        return self.keys(queue_of_run(run_id)).events(run_id)

    async def feed_start(self, run_id: str) -> tuple[str, int]:
        """Where a live feed starts: the stream's newest id and its entries-added count.

        Both come from one ``XINFO STREAM``, so they describe the same moment; a run
        without a stream yet starts at ``("0-0", 0)``. Redis before 7.0 does not count
        entries added (0 then: see :meth:`read_new_events`).
        """
        key = self.keys(queue_of_run(run_id)).events(run_id)
        try:
            info = await self.client.xinfo_stream(key)
        except ResponseError as exc:
            if "no such key" not in str(exc):
                raise
            return "0-0", 0
        return str(info["last-generated-id"]), int(info.get("entries-added") or 0)

    async def read_new_events(
        self, run_id: str, *, after: str, added: int, count: int = 1000
    ) -> FeedRead:
        """Up to ``count`` events after ``after``, and how many were trimmed unread before them.

        ``added`` is the stream's entries-added count when ``after`` was written
        (from :meth:`feed_start`, then advanced by what each read returned and missed).
        Never blocks: :func:`app.store.redis.feeds.wait_for_news` waits for news first.
        """
        keys = self.keys(queue_of_run(run_id))
        args = ReadEventsArgs(after, added, count)
        return _feed_read(
            run_id, await READ_EVENTS.send(self.scripts, self.client, keys, args, run_id)
        )

    async def stream_bounds(self, run_id: str) -> tuple[RunEvent | None, str | None]:
        """The oldest retained event of a run's stream and the id of its newest one."""
        key = self.keys(queue_of_run(run_id)).events(run_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.xrange(key, "-", "+", count=1)
        pipe.xrevrange(key, "+", "-", count=1)
        oldest, newest = cast(list[list[tuple[str, dict[str, str]]]], await pipe.execute())
        first = event_from_entry(run_id, oldest[0][0], oldest[0][1]) if oldest else None
        return first, newest[0][0] if newest else None
