"""``POST /runs/{id}/signals/{name}``: send a run a named signal with a JSON payload.

Buffering semantics (decided here; the README tells the same):

* the run waits in ``ctx.wait_for_signal(name)`` → the signal is **delivered**: its
  payload is recorded as that wait's outcome and the run is queued again (202,
  ``outcome: delivered``);
* the run is alive but not waiting for this name (queued, running, sleeping,
  waiting for another signal or a person) → the signal is **buffered** in the run's
  inbox, in order, and the next ``wait_for_signal(name)`` takes the oldest at once
  (202, ``outcome: buffered``). At most LEASEHOLD_MAX_PENDING_SIGNALS wait unread per
  run; one more is refused, 429 with ``Retry-After``, nothing written;
* the run finished, or is being cancelled: no wait can ever take it → 409, nothing
  written (a signal is never dropped silently). Unknown run → 404.

While Redis memory is past LEASEHOLD_MEMORY_HIGH_WATER a signal is refused like a
create (503 ``admission-refused`` with ``Retry-After``, nothing written).
A payload over LEASEHOLD_MAX_SIGNAL_BYTES is 413; a name that is not
``[A-Za-z0-9_.-]{1,128}`` is 422; bodies obey the API's one JSON rule
(:mod:`app.api.bodies`: finite numbers, bounded depth).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Response

from app.api.bodies import body_doc, optional_json_body
from app.api.routes.runs import RunId, State, problems
from app.models import IDEMPOTENCY_KEY_PATTERN, WAIT_NAME_PATTERN
from app.models.api import SignalRequest, SignalResult
from app.store.admission import create_cost_bytes
from app.store.codec import dumps
from app.store.waits.store import WaitStore

router = APIRouter(tags=["runs"])

SignalName = Annotated[str, Path(pattern=WAIT_NAME_PATTERN, description="the signal's name")]


@router.post(
    "/runs/{run_id}/signals/{name}",
    status_code=202,
    response_model=SignalResult,
    responses=problems(400, 404, 409, 413, 415, 422, 429, 503),
    openapi_extra=body_doc(SignalRequest, required=False),
)
async def signal_run(
    run_id: RunId,
    name: SignalName,
    state: State,
    response: Response,
    body: Annotated[SignalRequest | None, Depends(optional_json_body(SignalRequest))],
    idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY_PATTERN)] = None,
) -> SignalResult:
    """Deliver signal ``name`` to the run's ``ctx.wait_for_signal(name)``, or keep it for one.

    See the module docstring for what happens to a signal the run is not waiting for.
    With an ``Idempotency-Key`` (header or field) a repeat answers 200 with what became
    of the first signal (``Idempotency-Replayed: true``) and writes nothing.
    """
    key = body.idempotency_key if body is not None else None
    if idempotency_key and key and idempotency_key != key:
        raise HTTPException(400, "the Idempotency-Key header and the idempotency_key field differ")
    payload_json = dumps(body.payload if body is not None else None)
    size = len(payload_json.encode())
    limit = state.settings.max_signal_bytes
    if size > limit:
        raise HTTPException(
            413, f"the payload is {size} bytes; the limit is {limit} (LEASEHOLD_MAX_SIGNAL_BYTES)"
        )
    # a signal kept for a later wait is stored like a small run: admitted like one
    await state.memory.admit(create_cost_bytes(size))
    await state.quota.admit_signal()
    settings = state.settings
    store = WaitStore.for_settings(state.client, state.scripts, settings)
    outcome, replayed = await store.signal(
        run_id,
        name,
        payload_json,
        max_pending=state.settings.max_pending_signals,
        signal_id=idempotency_key or key or "",
    )
    if replayed:
        response.status_code = 200
        response.headers["Idempotency-Replayed"] = "true"
    return SignalResult(id=run_id, name=name, outcome=outcome.value)
