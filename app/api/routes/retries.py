"""Re-run what ended badly: ``POST /runs/{id}/retry`` (one run) and bulk retries by filter.

The model is a new linked run (:mod:`app.store.reruns`): the ended run keeps its
stream and its one terminal event; the new run inherits its effect records (and,
unless asked otherwise, its checkpoint) and both name each other.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Response

from app.api.bodies import body_doc, optional_json_body
from app.api.memory import create_cost_bytes
from app.api.routes.runs import RunId, State, problems
from app.errors import RunNotFound
from app.metrics import RUNS_CREATED
from app.models import IDEMPOTENCY_KEY_PATTERN, RetryRequest, Run
from app.store.keys import queue_of
from app.store.reruns import Rerun, retry_run

router = APIRouter(tags=["runs"])


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
        RUNS_CREATED.labels(retried.run.queue, retried.run.handler).inc()
    return retried.run
