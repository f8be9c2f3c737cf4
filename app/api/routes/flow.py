"""Flow control: a queue's concurrency limits, and a queued run's priority."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException

from app.api.bodies import body_doc, json_body
from app.api.routes.queues import QueueName
from app.api.routes.runs import RunId, State, priority_boost_ms, problems
from app.errors import QueueNotDeclared
from app.models import Run
from app.models.api import PriorityChange
from app.models.read import QueueLimits

router = APIRouter(tags=["flow control"])


@router.get("/queues/{name}/limits", response_model=QueueLimits, responses=problems(404, 422))
async def get_limits(name: QueueName, state: State) -> QueueLimits:
    """The queue's concurrency limits across all workers; unnamed means unlimited."""
    await _require(state, name)
    return await state.flow.limits(name)


@router.put(
    "/queues/{name}/limits",
    response_model=QueueLimits,
    openapi_extra=body_doc(QueueLimits),
    responses=problems(400, 404, 413, 415, 422, 503),
)
async def put_limits(
    name: QueueName,
    body: Annotated[QueueLimits, Depends(json_body(QueueLimits))],
    state: State,
) -> QueueLimits:
    """Replace the queue's limits whole (an operator's action).

    ``queue`` caps its running runs, ``handlers`` the runs of one handler, ``keys``
    the runs of one ``concurrency_key`` and ``default_key`` every other key. Runs
    waiting on a raised or removed limit start at once; a lowered limit stops no
    running run, it only stops claims until fewer run. More than
    ``LEASEHOLD_MAX_LIMITS`` handler and key entries → 422, nothing changes; so is a
    handler this API does not know (``GET /handlers``), which no create here could run:
    a typo would otherwise stand as a limit on nothing.
    """
    await _require(state, name)
    for handler in body.handlers:
        state.registry.get(handler)  # UnknownHandler: 422 unknown-handler
    entries = len(body.handlers) + len(body.keys)
    if entries > state.settings.max_limits:
        raise HTTPException(
            422,
            f"{entries} handler and key limits; at most {state.settings.max_limits} "
            "(LEASEHOLD_MAX_LIMITS)",
        )
    await state.flow.set_limits(name, body)
    return body


@router.patch(
    "/runs/{run_id}",
    response_model=Run,
    openapi_extra=body_doc(PriorityChange),
    responses=problems(400, 404, 409, 413, 415, 422, 503),
)
async def change_run(
    run_id: RunId,
    body: Annotated[PriorityChange, Depends(json_body(PriorityChange))],
    state: State,
) -> Run:
    """Change a queued run's priority; it keeps its age (aging counts from its enqueue).

    A run that is not queued (running, parked, ended) → 409 and nothing changes.
    """
    boost_ms = priority_boost_ms(body.priority, state.settings.priority_aging_step_s)
    await state.flow.set_priority(run_id, body.priority, boost_ms)
    return await state.store.get(run_id)


async def _require(state: State, name: str) -> None:
    try:
        await state.queues.require(name)
    except QueueNotDeclared as exc:
        raise HTTPException(404, str(exc)) from None
