"""GET /runs/{id}/events: a run's events over SSE, resumable with Last-Event-ID."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request

from app.api.eventstream import EventStream
from app.api.routes.runs import RunId, State, problems
from app.api.streaming import (
    admit_stream,
    event_stream_response,
    live_sink,
    resume_point,
    run_events,
)
from app.api.tree import follow_tree

router = APIRouter(tags=["events"])

SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "Server-Sent Events. Each message has `id` (Redis stream id), `event` (the "
            "event type) and `data` (RunEvent JSON). Replays history after Last-Event-ID, "
            "then follows live; keep-alive comments; closes after the terminal event. "
            "A `replay_unavailable` event (empty id) reports trimmed history."
        ),
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **problems(400, 404, 422, 503),
}


@router.get("/runs/{run_id}/events", responses=SSE_DOC, response_class=EventStream)
async def follow_run(
    run_id: RunId,
    state: State,
    request: Request,
    last_event_id: Annotated[str | None, Header(max_length=128)] = None,
    last_event_id_query: Annotated[str | None, Query(alias="last_event_id", max_length=128)] = None,
    include: Annotated[
        Literal["children"] | None,
        Query(description="`children`: one stream for the run and all its descendants"),
    ] = None,
) -> EventStream:
    """Replay the run's events (after Last-Event-ID), then follow live until it ends.

    Unknown run → 404 before the stream starts (browsers stop reconnecting on a
    non-200); malformed Last-Event-ID → 400; this process's stream caps reached →
    503 with Retry-After. ``include=children`` streams the whole tree instead
    (:mod:`app.api.tree`): every message's data names its run, ids are tree keys.
    """
    if include == "children":
        return await follow_tree(run_id, state, last_event_id or last_event_id_query)
    after = resume_point(last_event_id, last_event_id_query)
    run = await state.store.get(run_id)
    sink = live_sink(state, request.scope)
    stream = run_events(
        state.store,
        state.hub,
        run.id,
        after=after,
        retry_ms=state.settings.sse_retry_ms,
        sink=sink,
    )
    admit_stream(state, run.id)
    return event_stream_response(state, run, stream, sink=sink)
