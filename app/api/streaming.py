"""Turns a run's event stream into Server-Sent Events: replay, then live, then close.

* ``id:`` is the Redis stream id, ``event:`` the event type, ``data:`` the event
  JSON; the first message carries a ``retry:`` hint.
* History starts after ``Last-Event-ID`` (or at the beginning). When part of the
  history asked for was trimmed (streams are capped), a synthetic
  ``replay_unavailable`` event says so before the rest: never a silent gap.
* The stream closes after the terminal event, so a client that reconnects at
  any time learns the outcome and then stops.

Messages are yielded as bytes, sent as they are by the response
(:mod:`app.api.eventstream`): live events arrive pre-encoded from the hub
(:mod:`app.api.frames`), and whatever has queued up for a follower (a replay
chunk, a token burst) goes out as one write. Under uvicorn, a follower that has
caught up is then written to by the hub directly (:mod:`app.api.fanout`): the
same bytes, without a pass through this generator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException

from app.api.admission import StreamSlots, refuse
from app.api.eventstream import EventStream
from app.api.fanout import DirectSink, direct_sink
from app.api.frames import Burst, Frame, encode
from app.api.hub import EventHub, Subscription
from app.api.state import ApiState
from app.models import TERMINAL_EVENT_TYPES, Run, RunEvent, event_id_order, is_resume_point
from app.store.runs.store import RunStore
from app.telemetry.metrics import SSE_EVENTS_SENT, SSE_SUBSCRIBERS

REPLAY_CHUNK = 500
# live frames one write may carry: a follower behind by a burst catches up in few sends
LIVE_BATCH = 1000


class Cursor:
    """What one follower has been sent: its last stream id, the pending retry hint, the end."""

    __slots__ = ("ended", "hint", "last_id", "live", "order", "sink")  # see hub.Subscription

    def __init__(self, after: str | None, retry_ms: int) -> None:
        # last_id and order: up to its first direct write (then the feed's are its own)
        self.last_id = after
        self.order = event_id_order(after) if after else None
        self.hint: int | None = retry_ms  # the first message carries it
        self.ended = False
        self.sink: DirectSink | None = None  # set once the hub writes to it directly
        self.live = False  # written to directly once: past its replay for good

    def message(self, event: RunEvent, encoded: bytes | None = None) -> bytes:
        """The event's SSE message (``encoded`` if given and no hint is due); moves past it."""
        if encoded is None or self.hint is not None:
            encoded = encode(event, retry_ms=self.hint)
        self.hint = None
        if event.id:
            self.last_id, self.order = event.id, event_id_order(event.id)
        self.ended = event.type in TERMINAL_EVENT_TYPES
        return encoded

    def write(self, frames: Sequence[Frame]) -> bool:
        """Write the live frames not already sent to the follower's sink at once; False once done.

        Called by the hub's reader for every follower in direct mode (:meth:`go_direct`),
        with one :class:`~app.api.frames.Burst` per read. After the first one, the
        feed's reads come after everything the follower was sent (they are read in
        stream order), so a burst is one socket write and a tally: no comparison and
        no position kept. At 1,000 followers each one's objects are cold in the CPU's
        caches by its turn (the kernel's sends in between evict them), so every
        attribute touched is a likely cache miss: on real sockets a delivery's user CPU
        was ~3 µs, ~1.5 µs of it above the sink, and this path takes ~1 µs off it
        (``bench.fanout_cpu --sockets``).
        """
        if self.live and isinstance(frames, Burst):
            assert self.sink is not None
            if not self.sink.push(frames.chunk):
                return False
            frames.sent += len(frames)
            if frames.terminal:
                self.ended = True
                return False
            return True
        burst = frames if isinstance(frames, Burst) else Burst(frames)
        data, count, last = burst.chunk, len(burst), burst[-1]
        if self.order is not None and burst[0].order <= self.order:
            order = self.order  # the replay overlapped the feed: skip what it sent
            unsent = [item for item in burst if item.order > order]
            if not unsent:
                return True
            data, count = b"".join(item.chunk for item in unsent), len(unsent)
        assert self.sink is not None, "written to directly only after go_direct"
        if not self.sink.push(data):
            return False
        self.live = True
        if burst is frames:
            burst.sent += count  # the hub counts the read's deliveries once
        else:
            SSE_EVENTS_SENT.inc(count)
        if last.event.id:
            self.last_id, self.order = last.event.id, last.order
        self.ended = last.terminal
        return not last.terminal

    def go_direct(self, sink: DirectSink, subscription: Subscription[Frame]) -> bool:
        """Have the hub write live frames to ``sink`` through :meth:`write`; whether it will."""
        self.sink = sink
        return subscription.go_direct(self.write)

    def take(self, frames: list[Frame]) -> list[bytes]:
        """Messages for the frames this follower has not been sent, up to the terminal one."""
        messages = []
        for item in frames:
            if self.order is not None and item.order <= self.order:
                continue  # already sent during the replay
            messages.append(self.message(item.event, item.message))
            if self.ended:
                break
        return messages


def send(messages: list[bytes]) -> bytes:
    """Messages joined into one write, counted as sent."""
    SSE_EVENTS_SENT.inc(len(messages))
    return b"".join(messages)


async def replay_gap(store: RunStore, run_id: str, after: str | None) -> RunEvent | None:
    """A ``replay_unavailable`` event when history after ``after`` was trimmed, else None."""
    oldest, _ = await store.stream_bounds(run_id)
    if oldest is None or oldest.type == "created":
        return None  # nothing was trimmed
    if after is not None and event_id_order(after) >= event_id_order(oldest.id):
        return None  # the client is past the trimmed part
    return RunEvent(
        id="",
        run_id=run_id,
        type="replay_unavailable",
        ts=datetime.now(tz=UTC),
        fence=oldest.fence,
        data={"requested_after": after or "0-0", "oldest_available": oldest.id},
    )


async def run_events(
    store: RunStore,
    hub: EventHub,
    run_id: str,
    *,
    after: str | None,
    retry_ms: int,
    sink: DirectSink | None = None,
) -> AsyncIterator[bytes]:
    """Every event of a run after ``after``, live, ending with the terminal event.

    Ends early (without a terminal event) only when this follower fell too far
    behind; the client reconnects with Last-Event-ID and misses nothing. With a
    ``sink``, once caught up the follower is written to by the hub directly.
    """
    subscription = await hub.subscribe(run_id)
    SSE_SUBSCRIBERS.inc()
    cursor = Cursor(after, retry_ms)
    try:
        gap = await replay_gap(store, run_id, after)
        if gap is not None:
            yield send([cursor.message(gap)])
        async for chunk in replay(store, run_id, cursor):
            yield chunk
        while not cursor.ended:
            if sink is not None and caught_up(cursor, sink, subscription):
                await subscription.get()  # None: the end went out, or the follower was dropped
                return
            if not (frames := await subscription.get_batch(LIVE_BATCH)):
                return
            if messages := cursor.take(frames):
                yield send(messages)
    finally:
        SSE_SUBSCRIBERS.dec()
        hub.unsubscribe(run_id, subscription)


def caught_up(cursor: Cursor, sink: DirectSink, subscription: Subscription[Frame]) -> bool:
    """Hand the follower to the hub's direct writes if it has caught up; whether it was.

    Caught up: its first message (the ``retry:`` hint) was sent, so the headers
    are out, and nothing waits in its inbox.
    """
    if cursor.hint is not None or not sink.ready():
        return False
    return cursor.go_direct(sink, subscription)


async def replay(store: RunStore, run_id: str, cursor: Cursor) -> AsyncIterator[bytes]:
    """The stored events after the cursor, one write per chunk read, up to the terminal one."""
    while not cursor.ended:
        batch = await store.read_events(run_id, after=cursor.last_id, count=REPLAY_CHUNK)
        messages = []
        for event in batch:
            messages.append(cursor.message(event))
            if cursor.ended:
                break
        if messages:
            yield send(messages)
        if len(batch) < REPLAY_CHUNK:
            return


def resume_point(header: str | None, query: str | None) -> str | None:
    """The Last-Event-ID from the header or ``?last_event_id=``; 400 when malformed."""
    value = header or query
    if value is None or value == "":
        return None
    if not is_resume_point(value):
        raise HTTPException(400, f"Last-Event-ID {value!r} is not a stream id like 1700000000000-0")
    return value


def admit_stream(state: ApiState, run_id: str | None) -> None:
    """Take an SSE slot to follow ``run_id`` (None: a run about to be created), or refuse.

    Raises :class:`~app.errors.CapacityExceeded` (503) when the process serves
    ``sse_max_followers`` streams already, or follows ``sse_max_followed_runs``
    runs and this one would be another. The slot belongs to the response built
    next by :func:`event_stream_response`, which gives it back.
    """
    settings = state.settings
    new_run = run_id is None or not state.hub.followed(run_id)
    if new_run and state.hub.readers >= settings.sse_max_followed_runs:
        raise refuse(
            "runs",
            what="followed runs",
            limit=settings.sse_max_followed_runs,
            setting="LEASEHOLD_SSE_MAX_FOLLOWED_RUNS",
        )
    state.slots.take()


def live_sink(state: ApiState, scope: MutableMapping[str, Any]) -> DirectSink | None:
    """Where the hub may write a caught-up follower's live frames directly, if anywhere."""
    settings = state.settings
    return direct_sink(
        scope,
        max_buffer=settings.sse_write_buffer_max_bytes,
        send_timeout_s=settings.sse_send_timeout_s,
    )


def event_stream_response(
    state: ApiState,
    run: Run,
    stream: AsyncIterator[bytes],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    sink: DirectSink | None = None,
    slots: StreamSlots | None = None,
) -> EventStream:
    """An SSE response with the configured keep-alive and slow-client bounds.

    Holds the slot :func:`admit_stream` took (of ``slots``, the process's followers by
    default), until the response ends. ``sink``: the one the stream was given
    (:func:`live_sink`), so that its live frames and the keep-alives share one
    send-timeout clock.
    """
    return stream_response(
        state,
        stream,
        status_code=status_code,
        headers={"Cache-Control": "no-store", "X-Run-Id": run.id, **(headers or {})},
        sink=sink,
        slots=slots,
    )


def stream_response(
    state: ApiState,
    stream: AsyncIterator[Any],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    sink: DirectSink | None = None,
    slots: StreamSlots | None = None,
) -> EventStream:
    """Any event stream's response (runs, trees, activity), bounded by the SSE settings."""
    settings = state.settings
    return EventStream(
        stream,
        slots=slots or state.slots,
        status_code=status_code,
        ping_s=settings.sse_keepalive_s,
        send_timeout_s=settings.sse_send_timeout_s,
        max_buffer=settings.sse_write_buffer_max_bytes,
        headers=headers,
        sink=sink,
    )
