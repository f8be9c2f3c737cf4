"""GET /activity: the lifecycle events of every run of some queues, live, over SSE.

This is how the console's runs view stays current without polling. Each queue
has a capped activity stream that the Lua transitions write (see
``app.store.activity``); this module follows several of them in one response.

* **Fan-out.** :class:`ActivityHub` keeps one blocking ``XREAD`` per followed
  queue per process, however many consoles watch it, and copies entries into
  each follower's bounded inbox (the drop rule of ``app.api.hub``).
* **Position.** One SSE stream covers several queues, so its ``id:`` is a
  cursor holding a position per queue: ``default@1700000000000-0,mail@...``.
  Sent back as ``Last-Event-ID``, it resumes every queue exactly where it was.
* **Start.** A follower without a cursor starts at "now": the first message is a
  ``ready`` event carrying the cursor, after which the console loads the list
  (``GET /runs``) knowing nothing in between is missed.
* **Gaps.** A cursor older than what a full stream retains gets a
  ``replay_unavailable`` event naming the queue: reload the list, then go on.
* **New queues.** Following every queue (no ``queue=``), the set of queues is
  re-read every :data:`QUEUE_RESCAN_S` and new ones are followed from their start.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent

from app.api.hub import Feed, FeedRegistry, Subscription, fan_out, read_until_done
from app.models import ActivityEntry, event_id_order, is_stream_id
from app.store.activity import ActivityStore

log = logging.getLogger(__name__)

REPLAY_CHUNK = 500
MAX_QUEUES = 100
# following every queue, how often the set of queues is re-read (one SMEMBERS)
QUEUE_RESCAN_S = 2.0
_QUEUE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")

Cursor = dict[str, str]


class InvalidCursor(ValueError):
    """A Last-Event-ID that is not an activity cursor."""


def valid_queue(name: str) -> bool:
    """Whether ``name`` is a queue name (``QUEUE_NAME_PATTERN``), checked without regex quirks."""
    return 0 < len(name) <= 64 and set(name) <= _QUEUE_CHARS


def encode_cursor(cursor: Cursor) -> str:
    """``queue@id`` pairs, comma-separated, in queue order."""
    return ",".join(f"{queue}@{position}" for queue, position in sorted(cursor.items()))


def decode_cursor(text: str) -> Cursor:
    """Parse :func:`encode_cursor`'s output; raises :class:`InvalidCursor`."""
    cursor: Cursor = {}
    for part in text.split(","):
        queue, _, position = part.rpartition("@")
        if not valid_queue(queue) or not is_stream_id(position):
            raise InvalidCursor(
                f"Last-Event-ID {text[:80]!r} is not an activity cursor "
                "like default@1700000000000-0"
            )
        cursor[queue] = position
    if len(cursor) > MAX_QUEUES:
        raise InvalidCursor(f"an activity cursor names at most {MAX_QUEUES} queues")
    return cursor


class QueueFeed(Feed[ActivityEntry]):
    """One blocking reader of one queue's activity stream, shared in the process."""

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        self.position: str | None = None

    @property
    def queue(self) -> str:
        """The queue this feed reads (its key)."""
        return self.key


class ActivityHub:
    """Process-wide :class:`QueueFeed` registry; a subscription may span several feeds."""

    def __init__(self, store: ActivityStore, *, block_ms: int, queue_max: int) -> None:
        self._store = store
        self._block_ms = block_ms
        self._queue_max = queue_max
        self._feeds = FeedRegistry(QueueFeed, self._read)

    @property
    def readers(self) -> int:
        """How many queues this process is reading from Redis right now."""
        return len(self._feeds)

    def new_subscription(self) -> Subscription[ActivityEntry]:
        """An inbox to :meth:`follow` queues with."""
        return Subscription(self._queue_max)

    async def follow(self, subscription: Subscription[ActivityEntry], queue: str) -> str:
        """Deliver ``queue``'s new entries to ``subscription``; returns the feed's position.

        Everything after the returned position reaches the inbox, so a replay up
        to it followed by the inbox has no gap.
        """
        feed = self._feeds.join(queue, subscription)
        await feed.ready.wait()
        assert feed.position is not None
        return feed.position

    def unfollow(self, subscription: Subscription[ActivityEntry], queues: list[str]) -> None:
        """Stop delivering these queues; a feed's last follower stops its reader."""
        for queue in queues:
            self._feeds.leave(queue, subscription)

    async def close(self) -> None:
        """Stop every reader (API shutdown)."""
        await self._feeds.close()

    async def _read(self, feed: QueueFeed) -> None:
        await read_until_done(
            lambda: self._step(feed), "activity feed", log_extra={"queue": feed.queue}
        )

    async def _step(self, feed: QueueFeed) -> bool:
        """One blocking read of the queue's new entries, fanned out; never done."""
        if feed.position is None:
            feed.position = await self._store.newest(feed.queue)
            feed.ready.set()
        entries = await self._store.wait(feed.queue, after=feed.position, block_ms=self._block_ms)
        for entry in entries:
            feed.position = entry.id
            fan_out(feed.subscribers, entry)
        return False


@dataclass
class ActivityFollower:
    """One response's view: which queues, where it is in each, and what it sent."""

    store: ActivityStore
    hub: ActivityHub
    subscription: Subscription[ActivityEntry]
    cursor: Cursor = field(default_factory=dict)
    retry_ms: int | None = None

    def message(self, event: str, data: str) -> ServerSentEvent:
        """An SSE message whose id is the cursor after it (the first one hints ``retry``)."""
        message = ServerSentEvent(
            data=data, event=event, id=encode_cursor(self.cursor), retry=self.retry_ms
        )
        self.retry_ms = None
        return message

    def entry(self, entry: ActivityEntry) -> ServerSentEvent | None:
        """The message for an entry, or None when it was sent already (replay overlap)."""
        seen = self.cursor.get(entry.queue)
        if seen is not None and event_id_order(entry.id) <= event_id_order(seen):
            return None
        self.cursor[entry.queue] = entry.id
        return self.message("activity", entry.model_dump_json())

    async def join(self, queue: str, after: str | None) -> AsyncIterator[ServerSentEvent]:
        """Follow ``queue``: from "now" (``after`` None), or replaying after ``after``."""
        live_from = await self.hub.follow(self.subscription, queue)
        if after is None:
            self.cursor[queue] = live_from
            return
        self.cursor[queue] = after
        if await self.store.trimmed(queue, after=after):
            yield self.message("replay_unavailable", json.dumps({"queue": queue}))
        while True:
            batch = await self.store.read(queue, after=self.cursor[queue], count=REPLAY_CHUNK)
            for entry in batch:
                message = self.entry(entry)
                if message is not None:
                    yield message
            if len(batch) < REPLAY_CHUNK:
                return


async def activity_events(
    follower: ActivityFollower,
    *,
    queues: list[str] | None,
    resume: Cursor | None,
    rescan_s: float = QUEUE_RESCAN_S,
) -> AsyncIterator[ServerSentEvent]:
    """The activity of ``queues`` (every queue when None), live, until the client leaves.

    Ends early only when this follower fell too far behind; the client reconnects
    with its last cursor and misses nothing.
    """
    followed: list[str] = []
    try:
        for queue in queues if queues is not None else await follower.store.queues():
            followed.append(queue)
            start = resume.get(queue, "0-0") if resume is not None else None
            async for message in follower.join(queue, start):
                yield message
        if resume is None:
            yield follower.message("ready", json.dumps({"queues": followed}))
        async for message in _live(follower, followed, rescan_s=None if queues else rescan_s):
            yield message
    finally:
        follower.hub.unfollow(follower.subscription, followed)


async def _live(
    follower: ActivityFollower, followed: list[str], *, rescan_s: float | None
) -> AsyncIterator[ServerSentEvent]:
    """Entries from the hub as they come; every ``rescan_s`` (if set) join new queues."""
    loop = asyncio.get_running_loop()
    next_scan = None if rescan_s is None else loop.time() + rescan_s
    while True:
        if next_scan is not None and rescan_s is not None and loop.time() >= next_scan:
            async for message in _join_new_queues(follower, followed):
                yield message
            next_scan = loop.time() + rescan_s
        timeout = None if next_scan is None else max(0.0, next_scan - loop.time())
        try:
            entry = await asyncio.wait_for(follower.subscription.get(), timeout=timeout)
        except TimeoutError:
            continue
        if entry is None:
            return  # dropped for falling behind: the client resumes from its cursor
        sent = follower.entry(entry)
        if sent is not None:
            yield sent


async def _join_new_queues(
    follower: ActivityFollower, followed: list[str]
) -> AsyncIterator[ServerSentEvent]:
    """Follow queues created since the stream started, from their first entry."""
    for queue in await follower.store.queues():
        if queue not in followed and len(followed) < MAX_QUEUES:
            followed.append(queue)
            async for message in follower.join(queue, "0-0"):
                yield message
