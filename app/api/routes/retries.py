"""Re-run what ended badly: ``POST /runs/{id}/retry`` (one run) and bulk retries by filter.

The model is a new linked run (:mod:`app.store.runs.reruns`): the ended run keeps its
stream and its one terminal event; the new run inherits its effect records (and,
unless asked otherwise, its checkpoint) and both name each other.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Request, Response

from app.api.bodies import body_doc, json_body, optional_json_body
from app.api.operations import RetryDrivers
from app.api.routes.runs import RunId, State, problems
from app.api.state import api_state
from app.errors import OperationConflict, RunNotFound
from app.models import IDEMPOTENCY_KEY_PATTERN, OPERATION_ID_PATTERN, Run
from app.models.api import RetryRequest
from app.models.read import RetryFilter, RetryOperation
from app.store.admission import create_cost_bytes
from app.store.keys import queue_of
from app.store.runs.reruns import Rerun, retry_run
from app.telemetry.metrics import RUNS_CREATED

router = APIRouter(tags=["runs"])

OperationId = Annotated[str, Path(pattern=OPERATION_ID_PATTERN, description="a ULID")]


def drivers(request: Request) -> RetryDrivers:
    """FastAPI dependency: the bulk retries this API process drives in the request's
    namespace."""
    return api_state(request).retries


Drivers = Annotated[RetryDrivers, Depends(drivers)]


@router.post(
    "/runs/{run_id}/retry",
    status_code=201,
    response_model=Run,
    responses={
        200: {"model": Run, "description": "idempotent replay: the same new run"},
        **problems(400, 404, 409, 413, 415, 422, 503),
    },
    openapi_extra=body_doc(RetryRequest, required=False),
)
async def retry_one(
    run_id: RunId,
    state: State,
    response: Response,
    body: Annotated[RetryRequest | None, Depends(optional_json_body(RetryRequest))],
    idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY_PATTERN)] = None,
) -> Run:
    """Re-run a ``failed``, ``orphaned``, ``cancelled`` or ``expired`` run as a new run.

    The new run (201, ``Location``) has the old run's handler, input, metadata,
    budgets and lease policy, ``retry_of`` naming the old run (whose ``retried_by``
    names the new one). Effects the old run recorded are replayed, not called again,
    and their keys stay the same; ``checkpoint: "drop"`` starts from the beginning
    instead of the last checkpoint. The old run's event stream is left as it was.
    Unknown run → 404; a live or succeeded run, or one already re-run (the
    problem names the re-run) → 409; the same ``Idempotency-Key`` again → 200 with
    the same new run. While Redis memory is past the high-water mark → 503.
    """
    request = body or RetryRequest()
    if idempotency_key and request.idempotency_key and idempotency_key != request.idempotency_key:
        raise HTTPException(400, "the Idempotency-Key header and the idempotency_key field differ")
    queue = queue_of(run_id)
    if queue is None:
        raise RunNotFound(run_id)
    await state.queues.require(queue)  # the queue may have been undeclared since
    input_bytes = await state.store.client.hstrlen(state.store.keys(queue).run(run_id), "input")
    await state.memory.admit(create_cost_bytes(int(input_bytes)))
    await state.quota.admit_runs(1)
    retried = await retry_run(
        state.store,
        Rerun(
            run_id,
            checkpoint=request.checkpoint,
            max_attempts=request.max_attempts,
            idempotency_key=idempotency_key or request.idempotency_key,
        ),
    )
    response.headers["Location"] = f"/runs/{retried.run.id}"
    if retried.replayed:
        response.status_code = 200
        response.headers["Idempotency-Replayed"] = "true"
    else:
        RUNS_CREATED.labels(state.metric_queue(retried.run.queue), retried.run.handler).inc()
    return retried.run


@router.post(
    "/runs/retry",
    status_code=202,
    response_model=RetryOperation,
    responses=problems(400, 413, 415, 422, 503),
    openapi_extra=body_doc(RetryFilter),
)
async def retry_many(
    body: Annotated[RetryFilter, Depends(json_body(RetryFilter))],
    state: State,
    running: Drivers,
    response: Response,
) -> RetryOperation:
    """Re-run every ended run a filter matches, as a tracked operation (202, ``Location``).

    Filters (all must hold): ``queue``, ``handler``, ``status`` (failed, orphaned,
    cancelled, expired; default failed and orphaned), ``error_code``, and
    ``[finished_after, finished_before)``. Each match becomes a new linked run, as
    ``POST /runs/{id}/retry`` makes it (``checkpoint`` applies to all); runs re-run
    already are skipped. It goes on in steps of ``LEASEHOLD_RETRY_BATCH_SIZE`` runs,
    each saved: ``GET /operations/{id}`` shows its progress. At most ``limit`` runs
    (at most ``LEASEHOLD_RETRY_OPERATION_MAX_RUNS``, else 422). While this process
    drives ``LEASEHOLD_RETRY_OPERATIONS_MAX`` of them, or Redis memory is past the
    high-water mark → 503 with Retry-After, nothing written; a step that meets the
    mark waits for memory (``last_error`` says so). An operation that re-ran nothing
    is kept ``LEASEHOLD_OPERATION_EMPTY_RETENTION_S``.
    """
    most = state.settings.retry_operation_max_runs
    if body.limit is not None and body.limit > most:
        raise HTTPException(
            422, f"limit is {body.limit}; the most one bulk retry may re-run is {most}"
        )
    if body.queue is not None:
        await state.queues.require(body.queue)
    running.admit()  # before anything is written: a refusal leaves no record
    await state.memory.admit()  # its record, like a run's; each step is admitted too
    await state.queues.announce_configured()  # a fresh API's own queues are searched too
    progress = await running.operations.create(body, limit=body.limit or most)
    await running.start(progress)
    response.headers["Location"] = f"/operations/{progress.operation_id}"
    return await running.operations.get(progress.operation_id)


@router.get(
    "/operations/{operation_id}", response_model=RetryOperation, responses=problems(404, 422)
)
async def get_operation(operation_id: OperationId, running: Drivers) -> RetryOperation:
    """A bulk retry's filter and progress; ``stalled`` when the process driving it stopped."""
    return await running.operations.get(operation_id)


@router.post(
    "/operations/{operation_id}/resume",
    status_code=202,
    response_model=RetryOperation,
    responses=problems(404, 409, 422, 503),
)
async def resume_operation(
    operation_id: OperationId, state: State, running: Drivers
) -> RetryOperation:
    """Go on with a ``stalled`` bulk retry from its last saved step, in this process.

    Nothing is re-run twice (each re-run's idempotency key is derived from the
    operation and the run). Running elsewhere, done or cancelled → 409.
    """
    current = await running.operations.get(operation_id)
    if current.status != "stalled":
        raise OperationConflict(operation_id, f"it is {current.status}, not stalled")
    await state.queues.announce_configured()  # a fresh API's own queues are searched too
    await running.start(await running.operations.progress(operation_id))
    return await running.operations.get(operation_id)


@router.post(
    "/operations/{operation_id}/cancel",
    status_code=202,
    response_model=RetryOperation,
    responses=problems(404, 409, 422),
)
async def cancel_operation(operation_id: OperationId, running: Drivers) -> RetryOperation:
    """Stop a bulk retry after its current step; the runs it re-ran stay. Finished → 409."""
    await running.operations.commit(
        operation_id,
        driver=running.driver,
        lease_ms=1,
        fields={"status": "cancelled"},
        force=True,
    )
    return await running.operations.get(operation_id)
