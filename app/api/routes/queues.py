"""/queues: which queues runs may be created on, and what each one holds."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Response

from app.api.routes.builds import unavailable_builds
from app.api.routes.runs import State, problems
from app.errors import QueueLimitReached, QueueNotDeclared
from app.models import QUEUE_NAME_PATTERN
from app.models.api import QueuePage
from app.models.read import QueueInfo, QueueSeries
from app.store.queues.series import SERIES_MINUTES, read_series

router = APIRouter(tags=["queues"])

QueueName = Annotated[str, Path(pattern=QUEUE_NAME_PATTERN, description="the queue's name")]


@router.get("/queues", response_model=QueuePage)
async def list_queues(state: State) -> QueuePage:
    """Every declared queue with its depth, running, delayed and parked runs, and memory.

    Costs a few reads per declared queue (at most ``LEASEHOLD_MAX_QUEUES`` besides
    the configured ones), whatever the queues hold.
    """
    return QueuePage(items=await state.queues.infos(), max_queues=state.settings.max_queues)


@router.get("/queues/{name}", response_model=QueueInfo, responses=problems(404, 422))
async def get_queue(name: QueueName, state: State) -> QueueInfo:
    """One declared queue, with its flow control; a name nobody declared → 404.

    ``flow`` shows the limits, the slots each handler holds, the busiest
    ``LEASEHOLD_QUEUE_TOP_KEYS`` concurrency keys (running, queued, limit) and how
    many resources have runs waiting on them: bounded whatever the number of keys.
    ``build_unavailable``: ready runs pinned to a build no live worker of the queue runs.
    """
    try:
        info = await state.queues.info(name)
    except QueueNotDeclared as exc:
        raise HTTPException(404, str(exc)) from None
    flow = await state.flow.flow(name, state.settings.queue_top_keys)
    return info.model_copy(
        update={"flow": flow, "build_unavailable": await unavailable_builds(state, name)}
    )


@router.get("/queues/{name}/series", response_model=QueueSeries, responses=problems(404, 422))
async def queue_series(
    name: QueueName,
    state: State,
    minutes: Annotated[
        int, Query(ge=1, le=SERIES_MINUTES, description="Buckets, newest last")
    ] = SERIES_MINUTES,
) -> QueueSeries:
    """Runs that ended on the queue per minute (by status) and expired leases, last hour.

    The counts are kept by the scripts that end runs, one small hash per queue
    and minute that expires after an hour: throughput, failures and orphans for
    the console's charts. A name nobody declared → 404.
    """
    try:
        await state.queues.require(name)
    except QueueNotDeclared as exc:
        raise HTTPException(404, str(exc)) from None
    return await read_series(state.client, state.queues.keys(name), minutes)


@router.put(
    "/queues/{name}",
    response_model=QueueInfo,
    status_code=201,
    responses={200: {"model": QueueInfo, "description": "declared already"}, **problems(409, 422)},
)
async def declare_queue(name: QueueName, state: State, response: Response) -> QueueInfo:
    """Declare a queue so runs may be created on it (an operator's action). Idempotent.

    201 when it is new, 200 when it was declared already; past
    ``LEASEHOLD_MAX_QUEUES`` declared queues → 409 and nothing changes. Workers
    claim from it once started with it in their ``LEASEHOLD_QUEUES``.
    """
    bound, by_quota = await state.quota.bound("queues", state.queues.max_queues)
    try:
        created = await state.queues.declare(name, max_queues=bound)
    except QueueLimitReached:
        if by_quota:
            raise state.quota.over_count("queues", bound) from None
        raise
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/queues/{name}"
    return await state.queues.info(name)


@router.delete("/queues/{name}", status_code=204, responses=problems(404, 409, 422))
async def undeclare_queue(name: QueueName, state: State) -> Response:
    """Undeclare an empty queue, freeing a ``LEASEHOLD_MAX_QUEUES`` slot (an operator's action).

    204 when it is gone; a queue holding runs in any index, or one in this API's
    ``LEASEHOLD_QUEUES``, → 409 saying why; a name nobody declared → 404.
    """
    try:
        await state.queues.undeclare(name)
    except QueueNotDeclared as exc:
        raise HTTPException(404, str(exc)) from None
    return Response(status_code=204)
