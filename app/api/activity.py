"""GET /activity: the lifecycle events of every run of some queues, live, over SSE.

This is how the console's runs view stays current without polling. Each queue
has a capped activity stream that the Lua transitions write (see
``app.store.queues.activity``); this module follows several of them in one response.

* **Fan-out.** :class:`ActivityHub` reads each followed queue once per process,
  however many consoles watch it, and copies entries into each follower's
  bounded inbox (the drop rule of ``app.api.hub``).
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
* **Bounds.** Only declared queues (:mod:`app.store.queues.store`) are followed: a
  made-up name is refused before the stream starts. One request follows at most
  ``LEASEHOLD_ACTIVITY_MAX_QUEUES`` queues (without ``queue=``, the first that
  many: ``ready`` then carries ``limit``), one process at most
  ``LEASEHOLD_ACTIVITY_MAX_FOLLOWED_QUEUES`` distinct ones, and all of them are
  served by one blocking read (:mod:`app.store.redis.feeds`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent

from app.api.hub import Feed, FeedRegistry, Subscription, fan_out
from app.models import event_id_order, is_resume_point
from app.models.read import ActivityEntry
from app.store.queues.activity import ActivityStore
from app.store.redis.feeds import read_group, wait_for_news

log = logging.getLogger(__name__)

REPLAY_CHUNK = 500
READ_COUNT = 500  # entries per read of a feed
# hard ceiling of LEASEHOLD_ACTIVITY_MAX_QUEUES and of the queues one cursor may name
MAX_QUEUES = 1000
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
        if not valid_queue(queue) or not is_resume_point(position):
            raise InvalidCursor(
                f"Last-Event-ID {text[:80]!r} is not an activity cursor "
                "like default@1700000000000-0"
            )
        cursor[queue] = position
    if len(cursor) > MAX_QUEUES:
        raise InvalidCursor(f"an activity cursor names at most {MAX_QUEUES} queues")
    return cursor


class QueueFeed(Feed[ActivityEntry]):
    """The feed of one queue's activity stream, shared in the process."""

    @property
    def queue(self) -> str:
        """The queue this feed reads (its key)."""
        return self.key


class ActivityHub:
    """Process-wide :class:`QueueFeed` registry; a subscription may span several feeds.

    One blocking read serves every followed queue (one per queue in a cluster).
    At most ``max_queues`` distinct queues are followed at once.
    """

    def __init__(
        self, store: ActivityStore, *, block_ms: int, queue_max: int, max_queues: int
    ) -> None:
        self._store = store
        self._block_ms = block_ms
        self._queue_max = queue_max
        self.max_queues = max_queues
        self._feeds = FeedRegistry(self._new_feed, self, what="activity feed")

    @property
    def readers(self) -> int:
        """How many queues this process follows right now."""
        return len(self._feeds)

    def room_for(self, queues: list[str]) -> bool:
        """Whether following ``queues`` stays within ``max_queues`` distinct queues."""
        new = sum(1 for queue in queues if self._feeds.get(queue) is None)
        return new == 0 or len(self._feeds) + new <= self.max_queues

    def new_subscription(self) -> Subscription[ActivityEntry]:
        """An inbox to :meth:`follow` queues with."""
        return Subscription(self._queue_max)

    async def follow(
        self, subscription: Subscription[ActivityEntry], queues: list[str]
    ) -> dict[str, str]:
        """Deliver these queues' new entries to ``subscription``; returns each feed's position.

        Everything after a returned position reaches the inbox, so a replay up
        to it followed by the inbox has no gap. Every queue joins before any is
        awaited, so the reader is interrupted once for all of them.
        """
        feeds = [self._feeds.join(queue, subscription) for queue in queues]
        positions = {}
        for feed in feeds:
            await feed.ready.wait()
            assert feed.position is not None
            positions[feed.queue] = feed.position
        return positions

    def unfollow(self, subscription: Subscription[ActivityEntry], queues: list[str]) -> None:
        """Stop delivering these queues; a feed's last follower drops it."""
        for queue in queues:
            self._feeds.leave(queue, subscription)

    async def close(self) -> None:
        """Stop every reader (API shutdown)."""
        await self._feeds.close()

    def _new_feed(self, queue: str) -> QueueFeed:
        key = self._store.key(queue)
        return QueueFeed(queue, stream_key=key, group=read_group(self._store.client, key))

    async def start(self, feed: QueueFeed) -> None:
        """Start at the stream's newest entry: "now"."""
        feed.position = await self._store.newest(feed.queue)

    async def wait(self, positions: dict[str, str]) -> set[str]:
        """One blocking XREAD over every caught-up queue."""
        return await wait_for_news(self._store.client, positions, block_ms=self._block_ms)

    async def read(self, feed: QueueFeed) -> bool:
        """One read of the queue's new entries, fanned out; never done."""
        assert feed.position is not None
        entries = await self._store.read(feed.queue, after=feed.position, count=READ_COUNT)
        feed.pending = len(entries) >= READ_COUNT
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

    async def join(
        self, queue: str, after: str | None, *, live_from: str
    ) -> AsyncIterator[ServerSentEvent]:
        """Send ``queue`` (live from ``live_from``) from "now" (``after`` None) or ``after``."""
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
    queues: list[str],
    resume: Cursor | None,
    every_queue: int | None = None,
    rescan_s: float = QUEUE_RESCAN_S,
) -> AsyncIterator[ServerSentEvent]:
    """The activity of ``queues``, live, until the client leaves.

    ``every_queue`` (following every queue): how many queues this stream may
    follow in all; queues created later join it, up to that many. Ends early
    only when this follower fell too far behind; the client reconnects with its
    last cursor and misses nothing.
    """
    followed: list[str] = list(queues)
    try:
        live = await follower.hub.follow(follower.subscription, queues)
        for queue in queues:
            start = resume.get(queue, "0-0") if resume is not None else None
            async for message in follower.join(queue, start, live_from=live[queue]):
                yield message
        if resume is None:
            yield follower.message("ready", json.dumps(_ready(followed, every_queue)))
        scan = None if every_queue is None else rescan_s
        async for message in _live(follower, followed, rescan_s=scan, limit=every_queue):
            yield message
    finally:
        follower.hub.unfollow(follower.subscription, followed)


def _ready(followed: list[str], every_queue: int | None) -> dict[str, object]:
    """The ``ready`` message's data: the queues followed, and (following every queue) the cap."""
    data: dict[str, object] = {"queues": followed}
    if every_queue is not None and len(followed) >= every_queue:
        data["limit"] = every_queue  # more queues may exist: name them with ?queue=
    return data


async def _live(
    follower: ActivityFollower,
    followed: list[str],
    *,
    rescan_s: float | None,
    limit: int | None,
) -> AsyncIterator[ServerSentEvent]:
    """Entries from the hub as they come; every ``rescan_s`` (if set) join new queues."""
    loop = asyncio.get_running_loop()
    next_scan = None if rescan_s is None else loop.time() + rescan_s
    while True:
        if next_scan is not None and rescan_s is not None and loop.time() >= next_scan:
            async for message in _join_new_queues(follower, followed, limit=limit or MAX_QUEUES):
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
    follower: ActivityFollower, followed: list[str], *, limit: int
) -> AsyncIterator[ServerSentEvent]:
    """Follow queues created since the stream started, from their first entry, up to ``limit``.

    A queue the process has no room for (``activity_max_followed_queues``) is
    left out until a later scan finds room.
    """
    for queue in await follower.store.queues():
        if len(followed) >= limit:
            return
        if queue not in followed and follower.hub.room_for([queue]):
            followed.append(queue)
            live = await follower.hub.follow(follower.subscription, [queue])
            async for message in follower.join(queue, "0-0", live_from=live[queue]):
                yield message
