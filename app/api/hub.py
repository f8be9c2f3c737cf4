"""Per-process fan-out of run events: N followers of one run cost one Redis reader.

A :class:`RunFeed` owns a single blocking ``XREAD`` loop for one run and copies
each event into every subscriber's bounded queue. A subscriber that falls more
than ``queue_max`` events behind is dropped (its queue is cleared and closed):
it must never slow down the reader, the other subscribers or the writer. The
client then reconnects with ``Last-Event-ID`` and loses nothing.

The feed's starting position is fixed *before* a subscriber replays history, so
replay-then-tail has no gap: the subscriber's replay covers everything up to
at least that position, and the feed delivers everything after it (duplicates
are dropped by stream id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Generic, TypeVar

from redis.exceptions import RedisError

from app.models import TERMINAL_EVENT_TYPES, RunEvent
from app.store.runs import RunStore

log = logging.getLogger(__name__)

RETRY_DELAY_MAX_S = 2.0

T = TypeVar("T")


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


def fan_out(subscribers: set[Subscription[T]], item: T) -> None:
    """Offer ``item`` to every subscriber, dropping those too far behind to take it."""
    for subscription in list(subscribers):
        if not subscription.offer(item):
            subscribers.discard(subscription)


async def stop_readers(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel feed readers and wait until they are gone (API shutdown)."""
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)


class RunFeed:
    """One blocking reader for one run's stream, shared by every follower in the process."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.subscribers: set[Subscription[RunEvent]] = set()
        self.position: str | None = None
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class EventHub:
    """Process-wide registry of :class:`RunFeed`, created on first follower, dropped on last."""

    def __init__(self, store: RunStore, *, block_ms: int, queue_max: int) -> None:
        self._store = store
        self._block_ms = block_ms
        self._queue_max = queue_max
        self._feeds: dict[str, RunFeed] = {}

    @property
    def readers(self) -> int:
        """How many runs this process is reading from Redis right now."""
        return len(self._feeds)

    def followers(self, run_id: str) -> int:
        """How many subscribers a run has in this process."""
        feed = self._feeds.get(run_id)
        return len(feed.subscribers) if feed else 0

    async def subscribe(self, run_id: str) -> Subscription[RunEvent]:
        """Follow a run; returns once the feed's start position is fixed."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = RunFeed(run_id)
            self._feeds[run_id] = feed
            feed.task = asyncio.create_task(self._read(feed), name=f"feed:{run_id}")
        subscription: Subscription[RunEvent] = Subscription(self._queue_max)
        feed.subscribers.add(subscription)
        await feed.ready.wait()
        return subscription

    def unsubscribe(self, run_id: str, subscription: Subscription[RunEvent]) -> None:
        """Stop following; the last follower's departure stops the reader."""
        feed = self._feeds.get(run_id)
        if feed is None:
            return
        feed.subscribers.discard(subscription)
        if not feed.subscribers:
            del self._feeds[run_id]
            if feed.task is not None:
                feed.task.cancel()

    async def close(self) -> None:
        """Stop every reader (API shutdown)."""
        tasks = [feed.task for feed in self._feeds.values() if feed.task is not None]
        self._feeds.clear()
        await stop_readers(tasks)

    async def _read(self, feed: RunFeed) -> None:
        delay = 0.05
        while True:
            try:
                if feed.position is None:
                    _, newest = await self._store.stream_bounds(feed.run_id)
                    feed.position = newest or "0-0"
                    feed.ready.set()
                events = await self._store.wait_events(
                    feed.run_id, after=feed.position, block_ms=self._block_ms
                )
            except (RedisError, OSError) as exc:
                log.warning(
                    "event feed read failed, retrying: %s", exc, extra={"run_id": feed.run_id}
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAY_MAX_S)
                continue
            delay = 0.05
            for event in events:
                feed.position = event.id
                fan_out(feed.subscribers, event)
            if any(event.type in TERMINAL_EVENT_TYPES for event in events):
                return  # nothing follows a terminal event
