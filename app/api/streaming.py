"""Turns a run's event stream into Server-Sent Events: replay, then live, then close.

* ``id:`` is the Redis stream id, ``event:`` the event type, ``data:`` the event
  JSON; the first message carries a ``retry:`` hint.
* History starts after ``Last-Event-ID`` (or at the beginning). When part of the
  history asked for was trimmed (streams are capped), a synthetic
  ``replay_unavailable`` event says so before the rest: never a silent gap.
* The stream closes after the terminal event, so a client that reconnects at
  any time learns the outcome and then stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from fastapi import HTTPException
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.hub import EventHub
from app.api.state import ApiState
from app.metrics import SSE_EVENTS_SENT, SSE_SUBSCRIBERS
from app.models import EVENT_ID, TERMINAL_EVENT_TYPES, Run, RunEvent, event_id_order
from app.store.runs import RunStore

REPLAY_CHUNK = 500
MAX_STREAM_ID_PART = 2**64 - 1


def to_sse(event: RunEvent, *, retry_ms: int | None = None) -> ServerSentEvent:
    """One run event as an SSE message."""
    SSE_EVENTS_SENT.inc()
    return ServerSentEvent(
        data=event.model_dump_json(), event=event.type, id=event.id or None, retry=retry_ms
    )


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
    store: RunStore, hub: EventHub, run_id: str, *, after: str | None, retry_ms: int
) -> AsyncIterator[ServerSentEvent]:
    """Every event of a run after ``after``, live, ending with the terminal event.

    Ends early (without a terminal event) only when this follower fell too far
    behind; the client reconnects with Last-Event-ID and misses nothing.
    """
    subscription = await hub.subscribe(run_id)
    SSE_SUBSCRIBERS.inc()
    hint: int | None = retry_ms
    cursor = after
    try:
        gap = await replay_gap(store, run_id, after)
        if gap is not None:
            yield to_sse(gap, retry_ms=hint)
            hint = None
        while True:
            batch = await store.read_events(run_id, after=cursor, count=REPLAY_CHUNK)
            for event in batch:
                yield to_sse(event, retry_ms=hint)
                hint, cursor = None, event.id
                if event.type in TERMINAL_EVENT_TYPES:
                    return
            if len(batch) < REPLAY_CHUNK:
                break
        while (live := await subscription.get()) is not None:
            if cursor is not None and event_id_order(live.id) <= event_id_order(cursor):
                continue  # already sent during the replay
            yield to_sse(live, retry_ms=hint)
            hint, cursor = None, live.id
            if live.type in TERMINAL_EVENT_TYPES:
                return
    finally:
        SSE_SUBSCRIBERS.dec()
        hub.unsubscribe(run_id, subscription)


def resume_point(header: str | None, query: str | None) -> str | None:
    """The Last-Event-ID from the header or ``?last_event_id=``; 400 when malformed."""
    value = header or query
    if value is None or value == "":
        return None
    if not is_stream_id(value):
        raise HTTPException(400, f"Last-Event-ID {value!r} is not a stream id like 1700000000000-0")
    return value


def is_stream_id(value: str) -> bool:
    """Whether Redis accepts ``value`` as a stream id: ``<ms>-<seq>``, ASCII digits, 64-bit each.

    Checked in full (Python's ``$`` allows a trailing newline, ``\\d`` any Unicode
    digit): an id Redis rejects would fail the stream after its 200 was sent.
    """
    return (
        value.isascii()
        and EVENT_ID.fullmatch(value) is not None
        and all(int(part) <= MAX_STREAM_ID_PART for part in value.split("-"))
    )


def event_stream_response(
    state: ApiState,
    run: Run,
    stream: AsyncIterator[ServerSentEvent],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    """An SSE response with the configured keep-alive and slow-client send timeout."""
    settings = state.settings
    return EventSourceResponse(
        stream,
        status_code=status_code,
        ping=settings.sse_keepalive_s,
        send_timeout=settings.sse_send_timeout_s,
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Run-Id": run.id,
            **(headers or {}),
        },
    )
