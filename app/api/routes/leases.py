"""``GET /leases/{run_id}``: who holds a run now and at which fence (a gate's online check)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter

from app.api.routes.runs import RunId, State, problems
from app.errors import RunNotFound
from app.models.api import LeaseView
from app.store.leases.reading import read_lease

router = APIRouter()


@router.get(
    "/leases/{run_id}", response_model=LeaseView, responses=problems(404, 422), tags=["runs"]
)
async def get_lease(run_id: RunId, state: State) -> LeaseView:
    """The run's owner, fence and lease expiry now (Redis clock).

    A lease token whose owner or fence differs from this answer is stale: the run was
    taken over, even if the token has not expired yet.
    """
    lease = await read_lease(state.client, prefix=state.settings.data_prefix, run_id=run_id)
    if lease is None:
        raise RunNotFound(run_id)
    return LeaseView(**dataclasses.asdict(lease), held=lease.held)
