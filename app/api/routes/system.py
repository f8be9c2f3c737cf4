"""Handlers, workers, health and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.routes.runs import State
from app.models import HandlerInfo, ReadinessReport, WorkerInfo
from app.store import workers
from app.store.health import check_readiness

router = APIRouter()


@router.get("/handlers", response_model=list[HandlerInfo], tags=["handlers"])
async def list_handlers(state: State) -> list[HandlerInfo]:
    """Registered handlers with the JSON schema their input must satisfy."""
    return [
        HandlerInfo(name=spec.name, description=spec.description, input_schema=spec.input_schema())
        for spec in state.registry
    ]


@router.get("/workers", response_model=list[WorkerInfo], tags=["workers"])
async def list_workers(state: State) -> list[WorkerInfo]:
    """Live executors; ``id`` is the ``owner_id`` they write on the runs they hold."""
    return await workers.list_workers(state.client, state.settings.prefix)


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. Never touches Redis."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    tags=["health"],
    response_model=ReadinessReport,
    responses={503: {"model": ReadinessReport, "description": "not ready: see `problems`"}},
)
async def readyz(state: State) -> JSONResponse:
    """Readiness: Redis reachable and scripts loaded; eviction policy checked.

    Also says how Redis is deployed (``mode``: single, cluster or sentinel, from the
    URL) and its ``topology`` now: nodes, roles, slot ranges, the sentinels' primary.
    """
    readiness = await check_readiness(state.client, state.scripts)
    report = ReadinessReport(
        status="ready" if readiness.ready else "unavailable",
        redis_reachable=readiness.redis_reachable,
        scripts_loaded=readiness.scripts_loaded,
        maxmemory_policy=readiness.maxmemory_policy,
        mode=readiness.mode,
        topology=readiness.topology,
        problems=readiness.problems,
    )
    return JSONResponse(report.model_dump(), status_code=200 if readiness.ready else 503)
