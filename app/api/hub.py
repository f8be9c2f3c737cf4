"""Per-process fan-out of run events: N followers of one run, M runs, one Redis reader.

A :class:`RunFeed` reads one run's stream (the ``read_events`` script) and copies
each event into every subscriber's bounded queue. Feeds never block on their
own: once every feed is caught up, one blocking ``XREAD`` over all their streams
waits for news (:mod:`app.store.redis.feeds`; per queue in a cluster), so the number
of Redis connections does not grow with the number of runs followed. A
subscriber that falls more than ``queue_max`` events behind is dropped (its
queue is cleared and closed): it must never slow down the reader, the other
subscribers or the writer. The client then reconnects with ``Last-Event-ID``
and loses nothing.

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
bytes go to every subscriber (a read's frames as one :class:`~app.api.frames.Burst`);
a subscriber takes what has queued up in one :meth:`Subscription.get_batch`, so a
burst goes out in one write, not one each.
A subscriber in direct mode (:meth:`Subscription.go_direct`, :mod:`app.api.fanout`)
is handed each read's frames together, in the reader's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from redis.exceptions import RedisError

from app.api.frames import Burst, Frame, frame, gap
from app.retry import REDIS_BACKOFF
from app.store.redis.feeds import read_group, wait_for_news
from app.store.redis.refusals import describe
from app.store.runs.store import RunStore
from app.telemetry.metrics import SSE_EVENTS_SENT

log = logging.getLogger(__name__)

READ_COUNT = 1000  # entries per read of a feed

T = TypeVar("T")
F = TypeVar("F", bound="Feed[Any]")
F_contra = TypeVar("F_contra", bound="Feed[Any]", contravariant=True)


class Inbox(Generic[T]):
    """A bounded FIFO with one consumer: what ``asyncio.Queue`` gives a follower, lighter.

    A follower written to directly never queues anything, so the deque is made on
    the first put, and a waiting consumer holds one future: an idle follower's
    inbox costs a few hundred bytes, not the ~3 KiB of a queue (four deques and an
    event) each of 10,000 idle followers held.
    """

    __slots__ = ("_items", "_maxsize", "_waiter")

    def __init__(self, maxsize: int) -> None:
        self._items: deque[T] | None = None
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None

    def empty(self) -> bool:
        """Whether nothing is queued."""
        return not self._items

    def put_nowait(self, item: T) -> None:
        """Queue ``item``, waking the consumer; :class:`asyncio.QueueFull` at the bound."""
        items = self._items
        if items is None:
            items = self._items = deque()
        elif len(items) >= self._maxsize:
            raise asyncio.QueueFull
        items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> T:
        """The oldest item; :class:`asyncio.QueueEmpty` if there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> T:
        """The oldest item, once there is one."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()


class Subscription(Generic[T]):
    """One follower's bounded inbox; ``None`` in it means "stream closed, reconnect".

    Generic so the activity hub (``app.api.activity``) shares the drop rule. Slotted,
    as are the cursor and the sink a direct follower's write goes through: the
    fan-out touches each of 1,000 followers' objects once per event, between
    kernel sends that evict them from the CPU's caches, so every separate
    attribute dict is another cache miss per follower.
    """

    __slots__ = ("direct", "dropped", "queue")

    def __init__(self, maxsize: int) -> None:
        self.queue: Inbox[T | None] = Inbox(maxsize)
        self.dropped = False
        # set by go_direct: the feed hands what it read to this instead of the inbox
        self.direct: Callable[[Sequence[T]], bool] | None = None

    def offer(self, event: T | None) -> bool:
        """Deliver without waiting; False (and closed) if the follower is too far behind."""
        if self.dropped:
            return False
        if self.direct is not None:
            return event is not None and self.offer_all((event,))
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)
            return False
        return True

    def offer_all(self, events: Sequence[T]) -> bool:
        """Deliver events read together (one write when direct); False once closed."""
        if self.direct is None:
            return all(self.offer(event) for event in events)
        if self.direct(events):
            return True
        self.direct, self.dropped = None, True  # the end went out, or the follower is gone
        self.queue.put_nowait(None)  # the inbox is empty in direct mode: wakes its task
        return False

    def go_direct(self, write: Callable[[Sequence[T]], bool]) -> bool:
        """Have the feed call ``write`` with what it reads from now on, if nothing is queued.

        ``write`` returns False once the follower is done (the end sent, or it was
        dropped); the inbox then gets the close marker. False (nothing changed)
        while events are queued: the follower takes those first, in order.
        """
        if self.dropped or not self.queue.empty():
            return False
        self.direct = write
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


def fan_out_all(subscribers: set[Subscription[T]], items: Sequence[T]) -> None:
    """Offer ``items`` (read together, in order) to every subscriber, as :func:`fan_out`."""
    for subscription in list(subscribers):
        if not subscription.offer_all(items):
            subscribers.discard(subscription)


def fan_out_frames(subscribers: set[Subscription[Frame]], frames: Sequence[Frame]) -> None:
    """A run feed's read to every follower: one :class:`Burst`, its direct writes counted once."""
    burst = Burst(frames)
    fan_out_all(subscribers, burst)
    if burst.sent:  # what went straight to followers' sockets
        SSE_EVENTS_SENT.inc(burst.sent)


class Feed(Generic[T]):
    """One followed stream (a run's events, a queue's activity), shared by every subscriber.

    ``stream_key`` is the Redis key read; feeds of one ``group`` wait together in
    one blocking read (:mod:`app.store.redis.feeds`).
    """

    def __init__(self, key: str, *, stream_key: str, group: str) -> None:
        self.key = key
        self.stream_key = stream_key
        self.group = group
        self.subscribers: set[Subscription[T]] = set()
        self.ready = asyncio.Event()  # set once the reader has fixed its start position
        self.position: str | None = None
        self.pending = True  # may have entries to read now, without waiting
        self.done = False  # nothing follows what was read (a run's terminal event)


class FeedReader(Protocol[F_contra]):
    """What a hub tells the registry: how to start a feed, read it, and wait for news."""

    async def start(self, feed: F_contra) -> None:
        """Fix the feed's start position (``feed.position``)."""

    async def read(self, feed: F_contra) -> bool:
        """One non-blocking read, fanned out; sets ``feed.pending``; True once the feed is done."""

    async def wait(self, positions: dict[str, str]) -> set[str]:
        """The stream keys with news after their positions (blocking, bounded)."""


class FeedRegistry(Generic[F]):
    """A process's feeds by key, and ONE reader task per group serving all of them.

    A reader reads every feed with something pending, then waits for news on all
    of its group's feeds in a single blocking read; a feed joining while that
    read blocks interrupts it (cancelling the read, which closes its connection:
    the next read opens a fresh one), so the new feed is read from at once. The
    reader of a group ends when the group has no feed left. Shared by the run
    event hub and the activity hub, which differ only in what a feed reads.
    """

    def __init__(self, new_feed: Callable[[str], F], reader: FeedReader[F], *, what: str) -> None:
        self._new_feed = new_feed
        self._reader = reader
        self._what = what
        self._feeds: dict[str, F] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # group -> its reader
        self._blocked: dict[str, asyncio.Task[set[str]]] = {}  # group -> its blocking wait

    def __len__(self) -> int:
        return len(self._feeds)

    @property
    def groups(self) -> int:
        """How many readers (blocking reads, so connections) this registry runs."""
        return sum(1 for task in self._tasks.values() if not task.done())

    def get(self, key: str) -> F | None:
        """The feed of ``key``, if anyone follows it."""
        return self._feeds.get(key)

    def join(self, key: str, subscription: Subscription[Any]) -> F:
        """Add a subscriber to ``key``'s feed, starting the feed (and its group's reader)."""
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._new_feed(key)
            self._feeds[key] = feed
            self._wake(feed.group)
        feed.subscribers.add(subscription)
        return feed

    def leave(self, key: str, subscription: Subscription[Any]) -> None:
        """Remove a subscriber; the last one's departure drops the feed."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        feed.subscribers.discard(subscription)
        if not feed.subscribers:
            del self._feeds[key]
            if not any(other.group == feed.group for other in self._feeds.values()):
                self._interrupt(feed.group)  # the reader sees its group empty and ends

    async def close(self) -> None:
        """Stop every reader and wait until they are gone (API shutdown)."""
        tasks = list(self._tasks.values())
        self._feeds.clear()
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)

    def _wake(self, group: str) -> None:
        task = self._tasks.get(group)
        if task is None or task.done():
            self._tasks[group] = asyncio.create_task(
                self._serve(group), name=f"{self._what}:{group or '*'}"
            )
        else:
            self._interrupt(group)

    def _interrupt(self, group: str) -> None:
        blocked = self._blocked.get(group)
        if blocked is not None:
            blocked.cancel()

    async def _serve(self, group: str) -> None:
        await read_until_done(lambda: self._step(group), self._what, log_extra={"group": group})

    async def _step(self, group: str) -> bool:
        """Start new feeds, read those with news, else wait for news; True once none is left."""
        feeds = [feed for feed in self._feeds.values() if feed.group == group and not feed.done]
        if not feeds:
            return True  # nothing awaited since the check: join() starts a new reader
        fresh = [feed for feed in feeds if feed.position is None]
        if fresh:
            await asyncio.gather(*(self._start(feed) for feed in fresh))
        busy = [feed for feed in feeds if feed.pending]
        if busy:
            await asyncio.gather(*(self._read(feed) for feed in busy))
            return False
        by_key = {feed.stream_key: feed for feed in feeds}
        positions = {key: feed.position or "0-0" for key, feed in by_key.items()}
        woken = await self._wait(group, positions)
        for key in woken:
            by_key[key].pending = True
        return False

    async def _start(self, feed: F) -> None:
        await self._reader.start(feed)
        feed.ready.set()

    async def _read(self, feed: F) -> None:
        if await self._reader.read(feed):
            feed.done = True

    async def _wait(self, group: str, positions: dict[str, str]) -> set[str]:
        """The reader's blocking read, as a task :meth:`_interrupt` may cancel (then: no news)."""
        wait = asyncio.create_task(self._reader.wait(positions))
        self._blocked[group] = wait
        try:
            await asyncio.wait({wait})
        finally:
            self._blocked.pop(group, None)
            wait.cancel()  # when this reader itself is cancelled
        return set() if wait.cancelled() else wait.result()


async def read_until_done(
    step: Callable[[], Awaitable[bool]], what: str, log_extra: dict[str, str]
) -> None:
    """Call ``step`` until it returns True; a Redis error backs off and tries again.

    A feed's reader must outlive a Redis restart or a failover: its followers are
    waiting, and they resume from the feed's position once Redis answers. So it
    never gives up, whatever Redis answered (a reply no retry cures is logged as
    not transient, for a person to see, rather than leaving the followers
    waiting on a reader that is gone). The readers of many API processes come
    back from a Redis restart at jittered times, not together.
    """
    failures = REDIS_BACKOFF.streak()
    while True:
        try:
            if await step():
                return
        except (RedisError, OSError) as exc:
            why = describe(exc)
            await failures.wait(exc, what=f"{what}: read", why=why, logger=log, extra=log_extra)
            continue
        failures.reset()


class RunFeed(Feed[Frame]):
    """The feed of one run's stream, shared by every follower in the process."""

    def __init__(self, run_id: str, *, stream_key: str, group: str) -> None:
        super().__init__(run_id, stream_key=stream_key, group=group)
        self.added = 0  # the stream's entries-added count when `position` was written

    @property
    def run_id(self) -> str:
        """The run this feed reads (its key)."""
        return self.key


class EventHub:
    """Process-wide registry of :class:`RunFeed`, created on first follower, dropped on last.

    One blocking read serves every followed run (one per queue in a cluster).
    """

    def __init__(self, store: RunStore, *, block_ms: int, queue_max: int) -> None:
        self._store = store
        self._block_ms = block_ms
        self._queue_max = queue_max
        self._feeds = FeedRegistry(self._new_feed, self, what="event feed")

    @property
    def readers(self) -> int:
        """How many runs this process follows right now."""
        return len(self._feeds)

    def followed(self, run_id: str) -> bool:
        """Whether this process already follows ``run_id`` (a new follower costs no new key)."""
        return self._feeds.get(run_id) is not None

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
        """Stop following; the last follower's departure drops the run's feed."""
        self._feeds.leave(run_id, subscription)

    async def close(self) -> None:
        """Stop every reader (API shutdown)."""
        await self._feeds.close()

    def _new_feed(self, run_id: str) -> RunFeed:
        key = self._store.events_key(run_id)
        return RunFeed(run_id, stream_key=key, group=read_group(self._store.client, key))

    async def start(self, feed: RunFeed) -> None:
        """Start at the stream's newest entry and its entries-added count (one XINFO)."""
        feed.position, feed.added = await self._store.feed_start(feed.run_id)

    async def wait(self, positions: dict[str, str]) -> set[str]:
        """One blocking XREAD over every caught-up run."""
        return await wait_for_news(self._store.client, positions, block_ms=self._block_ms)

    async def read(self, feed: RunFeed) -> bool:
        """One read after the feed's position, fanned out; True once the terminal event was."""
        assert feed.position is not None
        read = await self._store.read_new_events(
            feed.run_id, after=feed.position, added=feed.added, count=READ_COUNT
        )
        feed.pending = len(read.events) >= READ_COUNT
        frames: list[Frame] = []
        if read.missing and read.events:
            log.warning(
                "event feed fell behind the stream's cap: %s events trimmed unread",
                read.missing if read.missing > 0 else "some",
                extra={"run_id": feed.run_id},
            )
            frames.append(gap(feed.position, read.events[0]))
        feed.added += max(read.missing, 0) + len(read.events)
        for event in read.events:
            feed.position = event.id
            frames.append(frame(event))
            if frames[-1].terminal:
                break
        if frames:
            fan_out_frames(feed.subscribers, frames)
        return bool(frames) and frames[-1].terminal
