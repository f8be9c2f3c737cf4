"""The per-process event hub: batched inboxes, and a feed that fell behind the stream's cap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from app.api.fanout import DirectSink
from app.api.frames import Frame
from app.api.hub import EventHub, Inbox, Subscription
from app.api.streaming import Cursor
from app.store.runs.store import RunStore
from app.telemetry.metrics import API_REGISTRY
from tests.support.polling import eventually
from tests.support.streams import append, new_run


async def test_a_batch_takes_what_queued_up_in_order_up_to_the_limit() -> None:
    inbox: Subscription[int] = Subscription(maxsize=10)
    for item in range(5):
        inbox.offer(item)
    assert await inbox.get_batch(3) == [0, 1, 2]
    assert await inbox.get_batch(3) == [3, 4]


async def test_a_dropped_inbox_gives_an_empty_batch() -> None:
    inbox: Subscription[int] = Subscription(maxsize=2)
    assert inbox.offer(0) and inbox.offer(1)
    assert not inbox.offer(2)  # too far behind: cleared and closed
    assert await inbox.get_batch(10) == []
    assert await inbox.get_batch(10) == []


async def test_an_inbox_wakes_its_waiting_follower_and_keeps_what_a_cancelled_one_left() -> None:
    inbox: Inbox[int] = Inbox(2)
    waiting = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait(7)
    assert await asyncio.wait_for(waiting, timeout=10) == 7
    cancelled = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    inbox.put_nowait(8)  # wakes it, but it is cancelled before it runs
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    inbox.put_nowait(9)
    with pytest.raises(asyncio.QueueFull):
        inbox.put_nowait(10)
    assert [await inbox.get(), inbox.get_nowait()] == [8, 9]  # nothing lost, in order
    with pytest.raises(asyncio.QueueEmpty):
        inbox.get_nowait()


async def frames_until(inbox: Subscription[Frame], count: int) -> list[Frame]:
    frames: list[Frame] = []
    while len(frames) < count:
        frames += await asyncio.wait_for(inbox.get_batch(100), timeout=10)
    return frames


@pytest.fixture
async def hub(run_store: RunStore) -> AsyncIterator[EventHub]:
    hub = EventHub(run_store, block_ms=100, queue_max=100)
    yield hub
    await hub.close()


async def test_a_feed_behind_the_streams_cap_announces_the_gap_before_the_rest(
    hub: EventHub, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    inbox = await hub.subscribe(run_id)
    position, _ = await run_store.feed_start(run_id)
    await append(redis_client, key, range(30), maxlen=10)
    frames = await frames_until(inbox, 11)
    notice = frames[0].event
    assert notice.type == "replay_unavailable"
    assert notice.id == ""
    assert notice.data == {"requested_after": position, "oldest_available": frames[1].event.id}
    assert [frame.event.data["i"] for frame in frames[1:]] == list(range(20, 30))


async def test_every_follower_gets_the_same_frames_encoded_once(
    hub: EventHub, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    inboxes = [await hub.subscribe(run_id) for _ in range(3)]
    await append(redis_client, key, range(5))
    seen = [await frames_until(inbox, 5) for inbox in inboxes]
    assert [frame.event.data["i"] for frame in seen[0]] == list(range(5))
    assert all(
        first is other for frames in seen[1:] for first, other in zip(seen[0], frames, strict=True)
    )
    assert seen[0][0].message.startswith(f"id: {seen[0][0].event.id}\r\nevent: token\r\n".encode())


class SocketBytes:
    """What a follower's socket was given: the transport and flow-control parts a sink reads."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.write_paused = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class OpenChunkedResponse:
    """A uvicorn cycle whose chunked 200 is out and still open."""

    response_started = True
    chunked_encoding = True
    response_complete = False
    disconnected = False

    def __init__(self, socket: SocketBytes) -> None:
        self.transport = self.flow = socket


def sent_counter() -> float:
    return API_REGISTRY.get_sample_value("leasehold_sse_events_sent_total") or 0.0


async def test_direct_followers_get_each_read_as_one_write_and_each_delivery_is_counted(
    hub: EventHub, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    run_id, key = await new_run(run_store)
    _, newest = await run_store.stream_bounds(run_id)
    sockets = [SocketBytes() for _ in range(3)]
    for socket in sockets:
        inbox = await hub.subscribe(run_id)
        cursor = Cursor(newest, retry_ms=1000)
        cursor.hint = None  # as after a replay: the retry hint went out with it
        response = OpenChunkedResponse(socket)
        sink = DirectSink(response, max_buffer=1 << 20, send_timeout_s=5)  # type: ignore[arg-type]
        assert cursor.go_direct(sink, inbox)
    before = sent_counter()
    await append(redis_client, key, range(4))  # one MULTI: the feed reads them together

    async def writes() -> list[int]:
        return [len(socket.writes) for socket in sockets]

    await eventually(writes, until=all, what="every follower written to")
    events = await run_store.read_events(run_id, after=newest)
    assert [event.data["i"] for event in events] == list(range(4))
    for socket in sockets:
        assert len(socket.writes) == 1, "a read's frames go out in one write"
        assert socket.writes[0].count(b"event: token") == 4
        assert socket.writes[0] is sockets[0].writes[0], "joined once for every follower"
    assert sent_counter() - before == 3 * 4


async def blocked_readers(client: aioredis.Redis) -> int:
    return sum(1 for entry in await client.client_list() if entry.get("cmd") == "xread")


async def test_many_runs_share_one_blocking_read_and_each_gets_its_own_events(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    hub = EventHub(run_store, block_ms=5000, queue_max=100)
    try:
        runs = [await new_run(run_store) for _ in range(30)]
        inboxes = [await hub.subscribe(run_id) for run_id, _ in runs]
        readers = await eventually(
            lambda: blocked_readers(redis_client), until=lambda n: n >= 1, what="the reader"
        )
        assert readers == 1
        for index, (_, key) in enumerate(runs):
            await append(redis_client, key, range(index, index + 2))
        seen = [await frames_until(inbox, 2) for inbox in inboxes]
        assert [[frame.event.data["i"] for frame in frames] for frames in seen] == [
            [index, index + 1] for index in range(30)
        ]
        # once it waits again, it is still one blocking read for all thirty
        readers = await eventually(
            lambda: blocked_readers(redis_client), until=lambda n: n >= 1, what="the reader"
        )
        assert readers == 1
    finally:
        await hub.close()


async def test_a_run_joining_while_the_reader_blocks_is_read_at_once(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    hub = EventHub(run_store, block_ms=60_000, queue_max=100)  # no wait ends on its own
    try:
        first, _ = await new_run(run_store)
        await hub.subscribe(first)
        await eventually(
            lambda: blocked_readers(redis_client), until=lambda n: n == 1, what="the reader"
        )
        second, key = await new_run(run_store)
        inbox = await asyncio.wait_for(hub.subscribe(second), timeout=10)
        await append(redis_client, key, range(3))
        frames = await frames_until(inbox, 3)
        assert [frame.event.data["i"] for frame in frames] == [0, 1, 2]
    finally:
        await hub.close()


async def test_the_reader_stops_when_the_last_follower_leaves(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    hub = EventHub(run_store, block_ms=60_000, queue_max=100)
    try:
        run_id, _ = await new_run(run_store)
        inbox = await hub.subscribe(run_id)
        await eventually(
            lambda: blocked_readers(redis_client), until=lambda n: n == 1, what="the reader"
        )
        hub.unsubscribe(run_id, inbox)
        readers = await eventually(
            lambda: blocked_readers(redis_client), until=lambda n: n == 0, what="no reader"
        )
        assert readers == 0
    finally:
        await hub.close()
