"""Routes where a person decides what happens to a parked run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException

from app.api.bodies import body_doc, optional_json_body
from app.api.routes.runs import RunId, State, problems
from app.models import RunStatus
from app.models.api import ResumeRequest, StatusChange
from app.store.codec import dumps

router = APIRouter(tags=["runs"])


@router.post(
    "/runs/{run_id}/resume",
    status_code=202,
    response_model=StatusChange,
    responses=problems(400, 404, 409, 413, 415, 422),
    openapi_extra=body_doc(ResumeRequest, required=False),
)
async def resume_run(
    run_id: RunId,
    state: State,
    body: Annotated[ResumeRequest | None, Depends(optional_json_body(ResumeRequest))],
) -> StatusChange:
    """Resume a run the watchdog escalated (``waiting_human``), with an optional input.

    The run is queued again at the head of the line (fence+1); its handler is
    called again with ``ctx.resume_input`` set and its last checkpoint in
    ``ctx.state``. Any other status → 409.
    """
    resume_input = body.input if body is not None else None
    size = len(dumps(resume_input).encode())
    if size > state.settings.max_input_bytes:
        raise HTTPException(
            413, f"input is {size} bytes; the limit is {state.settings.max_input_bytes}"
        )
    await state.store.resume(run_id, resume_input)
    return StatusChange(id=run_id, status=RunStatus.QUEUED)
