"""GET /runs/{id}/children: the runs a run started, oldest first, page by page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from app.api.routes.runs import RunId, State, problems
from app.models.read import RunPage
from app.store.codec import LARGE_FIELDS

router = APIRouter(tags=["runs"])

CHILDREN_PAGE_MAX = 500


@router.get("/runs/{run_id}/children", response_model=RunPage, responses=problems(400, 404, 422))
async def list_children(
    run_id: RunId,
    state: State,
    limit: Annotated[int, Query(ge=1, le=CHILDREN_PAGE_MAX)] = 50,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
) -> Response:
    """The run's children in the order they were spawned, as summaries (no input/output).

    Each item is a run (status, handler, created_at, finished_at, parent_id, ...);
    pass ``next_cursor`` back as ``cursor`` for the next page (None: no more now;
    a child spawned later comes after the last one listed). Unknown run → 404; a
    run without children → an empty page; a cursor this API did not return → 400.
    """
    page = await state.tree.children_page(run_id, limit=limit, cursor=cursor)
    # summaries, as GET /runs lists them: the large fields are not read, so not shown
    omitted = {"items": {"__all__": set(LARGE_FIELDS)}}
    return Response(page.model_dump_json(exclude=omitted), media_type="application/json")
