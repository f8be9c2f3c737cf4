"""Per-process fan-out of run events: N followers of one run cost one Redis reader.

A :class:`RunFeed` owns a single reader for one run (the ``read_events`` script,
pipelined behind a blocking ``XREAD`` when it waits for news) and copies each
event into every subscriber's bounded queue. A subscriber that falls more
than ``queue_max`` events behind is dropped (its queue is cleared and closed):
it must never slow down the reader, the other subscribers or the writer. The
client then reconnects with ``Last-Event-ID`` and loses nothing.

The feed's starting position is fixed *before* a subscriber replays history, so
replay-then-tail has no gap: the subscriber's replay covers everything up to
at least that position, and the feed delivers everything after it (duplicates
are dropped by stream id).

A feed that falls further behind than the stream's cap (``LEASEHOLD_EVENTS_MAXLEN``)
would find events trimmed before it read them. It is told so by the read itself
(``read_events``: the entries and how many went missing, in one atomic step) and
sends a ``replay_unavailable`` event before the rest, as a replay does: never a
silent gap.

Each event is encoded once, as a :class:`~app.api.frames.Frame`, and the same
bytes go to every subscriber; a subscriber takes what has queued up in one
:meth:`Subscription.get_batch`, so a burst goes out in one write, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from redis.exceptions import RedisError

from app.api.frames import Frame, frame, gap
from app.store.runs import RunStore

log = logging.getLogger(__name__)

RETRY_DELAY_S = 0.05
RETRY_DELAY_MAX_S = 2.0
READ_COUNT = 1000  # entries per read of a feed

T = TypeVar("T")
F = TypeVar("F", bound="Feed[Any]")


class Subscription(Generic[T]):
    """One follower's bounded inbox; ``None`` in it means "stream closed, reconnect".

    Generic so the activity hub (``app.api.activity``) shares the drop rule.
    """

    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue[T | None] = asyncio.Queue(maxsize=maxsize)
        self.dropped = False

    def offer(self, event: T | None) -> bool:
        """Deliver without waiting; False (and closed) if the follower is too far behind."""
        if self.dropped:
            return False
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)
            return False
        return True

    async def get(self) -> T | None:
        """The next event, or None once the subscription is closed."""
        return await self.queue.get()

    async def get_batch(self, limit: int) -> list[T]:
        """Wait for one event, then take whatever else is queued, up to ``limit``, in order.

        An empty list means the subscription is closed (it was dropped).
        """
        if self.dropped and self.queue.empty():
            return []
        item = await self.queue.get()
        batch: list[T] = []
        while item is not None:
            batch.append(item)
            if len(batch) >= limit or self.queue.empty():
                return batch
            item = self.queue.get_nowait()
        self.dropped = True  # the close marker: this batch goes out, the next call is []
        return batch


def fan_out(subscribers: set[Subscription[T]], item: T) -> None:
    """Offer ``item`` to every subscriber, dropping those too far behind to take it."""
    for subscription in list(subscribers):
        if not subscription.offer(item):
            subscribers.discard(subscription)


class Feed(Generic[T]):
    """One reader task for one key (a run, a queue), shared by every subscriber in the process."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.subscribers: set[Subscription[T]] = set()
        self.ready = asyncio.Event()  # set once the reader has fixed its start position
        self.task: asyncio.Task[None] | None = None


class FeedRegistry(Generic[F]):
    """A process's feeds by key: a reader starts with its first subscriber, stops with its last.

    Shared by the run event hub and the activity hub, which differ only in what
    a feed reads.
    """

    def __init__(
        self, new_feed: Callable[[str], F], reader: Callable[[F], Coroutine[Any, Any, None]]
    ) -> None:
        self._new_feed = new_feed
        self._reader = reader
        self._feeds: dict[str, F] = {}

    def __len__(self) -> int:
        return len(self._feeds)

    def get(self, key: str) -> F | None:
        """The feed of ``key``, if anyone follows it."""
        return self._feeds.get(key)

    def join(self, key: str, subscription: Subscription[Any]) -> F:
        """Add a subscriber to ``key``'s feed, starting the feed and its reader if needed."""
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._new_feed(key)
            self._feeds[key] = feed
            feed.task = asyncio.create_task(self._reader(feed), name=f"feed:{key}")
        feed.subscribers.add(subscription)
        return feed

    def leave(self, key: str, subscription: Subscription[Any]) -> None:
        """Remove a subscriber; the last one's departure stops the reader."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        feed.subscribers.discard(subscription)
        if not feed.subscribers:
            del self._feeds[key]
            if feed.task is not None:
                feed.task.cancel()

    async def close(self) -> None:
        """Stop every reader and wait until they are gone (API shutdown)."""
        tasks = [feed.task for feed in self._feeds.values() if feed.task is not None]
        self._feeds.clear()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


async def read_until_done(
    step: Callable[[], Awaitable[bool]], what: str, log_extra: dict[str, str]
) -> None:
    """Call ``step`` until it returns True; a Redis error backs off and tries again.

    A feed's reader must outlive a Redis restart or a failover: its followers are
    waiting, and they resume from the feed's position once Redis answers.
    """
    delay = RETRY_DELAY_S
    while True:
        try:
            if await step():
                return
        except (RedisError, OSError) as exc:
            log.warning("%s: read failed, retrying in %.2fs: %s", what, delay, exc, extra=log_extra)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_MAX_S)
            continue
        delay = RETRY_DELAY_S


class RunFeed(Feed[Frame]):
    """One blocking reader for one run's stream, shared by every follower in the process."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.position: str | None = None
        self.added = 0  # the stream's entries-added count when `position` was written
        self.caught_up = False  # the last read came back short: wait before the next

    @property
    def run_id(self) -> str:
        """The run this feed reads (its key)."""
        return self.key


class EventHub:
    """Process-wide registry of :class:`RunFeed`, created on first follower, dropped on last."""

    def __init__(self, store: RunStore, *, block_ms: int, queue_max: int) -> None:
        self._store = store
        self._block_ms = block_ms
        self._queue_max = queue_max
        self._feeds = FeedRegistry(RunFeed, self._read)

    @property
    def readers(self) -> int:
        """How many runs this process is reading from Redis right now."""
        return len(self._feeds)

    def followers(self, run_id: str) -> int:
        """How many subscribers a run has in this process."""
        feed = self._feeds.get(run_id)
        return len(feed.subscribers) if feed else 0

    async def subscribe(self, run_id: str) -> Subscription[Frame]:
        """Follow a run; returns once the feed's start position is fixed."""
        subscription: Subscription[Frame] = Subscription(self._queue_max)
        await self._feeds.join(run_id, subscription).ready.wait()
        return subscription

    def unsubscribe(self, run_id: str, subscription: Subscription[Frame]) -> None:
        """Stop following; the last follower's departure stops the reader."""
        self._feeds.leave(run_id, subscription)

    async def close(self) -> None:
        """Stop every reader (API shutdown)."""
        await self._feeds.close()

    async def _read(self, feed: RunFeed) -> None:
        # True after the terminal event: nothing follows it
        await read_until_done(
            lambda: self._step(feed), "event feed", log_extra={"run_id": feed.run_id}
        )

    async def _step(self, feed: RunFeed) -> bool:
        """One read, after waiting for news when the feed had caught up; True once terminal."""
        if feed.position is None:
            feed.position, feed.added = await self._store.feed_start(feed.run_id)
            feed.ready.set()
        if feed.caught_up:
            read = await self._store.wait_and_read(
                feed.run_id,
                after=feed.position,
                added=feed.added,
                block_ms=self._block_ms,
                count=READ_COUNT,
            )
        else:
            read = await self._store.read_new_events(
                feed.run_id, after=feed.position, added=feed.added, count=READ_COUNT
            )
        feed.caught_up = len(read.events) < READ_COUNT
        if read.missing and read.events:
            log.warning(
                "event feed fell behind the stream's cap: %s events trimmed unread",
                read.missing if read.missing > 0 else "some",
                extra={"run_id": feed.run_id},
            )
            fan_out(feed.subscribers, gap(feed.position, read.events[0]))
        feed.added += max(read.missing, 0) + len(read.events)
        for event in read.events:
            feed.position = event.id
            encoded = frame(event)
            fan_out(feed.subscribers, encoded)
            if encoded.terminal:
                return True
        return False
