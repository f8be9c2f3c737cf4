"""GET /activity: every run's lifecycle events on some queues, live, over SSE."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query

from app.api.activity import (
    MAX_QUEUES,
    ActivityFollower,
    Cursor,
    InvalidCursor,
    activity_events,
    decode_cursor,
    valid_queue,
)
from app.api.admission import refuse
from app.api.eventstream import EventStream
from app.api.routes.runs import State, problems
from app.api.state import ApiState
from app.api.streaming import stream_response
from app.errors import QueueNotDeclared
from app.store.queues.activity import ActivityStore

router = APIRouter(tags=["activity"])

ACTIVITY_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "Server-Sent Events, endless. `activity` messages carry an ActivityEntry "
            "(run_id, event_id, type, status, fence, ts). Without Last-Event-ID the stream "
            "starts now, with a `ready` message first; with one it resumes each queue "
            "after its position. `replay_unavailable` (data: {queue}) says that queue's "
            "capped history no longer reaches back that far. Every message's id is a "
            "cursor over all the queues: `default@1700000000000-0,mail@...`."
        ),
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **problems(400, 422, 503),
}


def _queues(requested: list[str] | None, limit: int) -> list[str] | None:
    if not requested:
        return None
    unique = sorted(set(requested))
    if len(unique) > limit or not all(valid_queue(name) for name in unique):
        raise HTTPException(400, f"queue names must match [A-Za-z0-9_-]{{1,64}}, at most {limit}")
    return unique


def _resume(header: str | None) -> Cursor | None:
    if not header:
        return None
    try:
        return decode_cursor(header)
    except InvalidCursor as exc:
        raise HTTPException(400, str(exc)) from None


async def _declared(state: ApiState, queues: list[str]) -> list[str]:
    """``queues`` if every one is declared, else 422 naming one that is not (nothing opened)."""
    undeclared = await state.queues.undeclared(queues)
    if undeclared:
        raise QueueNotDeclared(undeclared[0], await state.queues.declared())
    return queues


@router.get("/activity", responses=ACTIVITY_DOC, response_class=EventStream)
async def follow_activity(
    state: State,
    queue: Annotated[list[str] | None, Query(max_length=MAX_QUEUES)] = None,
    last_event_id: Annotated[str | None, Header(max_length=8192)] = None,
) -> EventStream:
    """Follow the lifecycle events of every run on ``queue`` (repeatable; default all).

    Handler events (token, progress, wait, verdict) are not included: follow a run's
    own stream for those. Malformed queue names or Last-Event-ID, or more queues
    than ``LEASEHOLD_ACTIVITY_MAX_QUEUES`` → 400; a queue not declared → 422;
    this process's caps on streams or followed queues reached → 503 with Retry-After.
    Without ``queue=`` it follows the first ``LEASEHOLD_ACTIVITY_MAX_QUEUES`` queues
    (``ready`` then says ``limit``).
    """
    settings = state.settings
    limit = settings.activity_max_queues
    requested = _queues(queue, limit)
    resume = _resume(last_event_id)
    store = ActivityStore(state.client, prefix=settings.data_prefix)
    if requested is None:
        queues, every_queue = (await state.queues.declared())[:limit], limit
    else:
        queues, every_queue = await _declared(state, requested), None
    if not state.activity.room_for(queues):
        raise refuse(
            "queues",
            what="followed queues",
            limit=state.activity.max_queues,
            setting="LEASEHOLD_ACTIVITY_MAX_FOLLOWED_QUEUES",
        )
    follower = ActivityFollower(
        store=store,
        hub=state.activity,
        subscription=state.activity.new_subscription(),
        retry_ms=settings.sse_retry_ms,
    )
    stream = activity_events(follower, queues=queues, resume=resume, every_queue=every_queue)
    state.slots.take()
    return stream_response(state, stream)
