"""Handlers, workers, health and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from app.api.memory import MemoryAdmission
from app.api.routes.runs import State
from app.models import HandlerInfo, ReadinessReport, RedisMemory, WorkerInfo
from app.store import workers
from app.store.health import check_readiness
from app.store.memory import pressure_problems

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
    Memory pressure (past the high-water mark, at maxmemory, no maxmemory at all)
    is listed in ``problems`` without failing readiness: reads and running work
    still go on; ``memory.creates_refused`` says whether creates are refused.
    """
    readiness = await check_readiness(state.client, state.scripts)
    problems = list(readiness.problems)
    memory = await _memory(state.memory, problems) if readiness.redis_reachable else None
    report = ReadinessReport(
        status="ready" if readiness.ready else "unavailable",
        redis_reachable=readiness.redis_reachable,
        scripts_loaded=readiness.scripts_loaded,
        maxmemory_policy=readiness.maxmemory_policy,
        mode=readiness.mode,
        topology=readiness.topology,
        memory=memory,
        problems=problems,
    )
    return JSONResponse(report.model_dump(), status_code=200 if readiness.ready else 503)


async def _memory(admission: MemoryAdmission, problems: list[str]) -> RedisMemory | None:
    """A fresh memory reading, its problems appended; None when Redis cannot say."""
    try:
        reading = await admission.refresh()
    except (RedisError, OSError) as exc:
        problems.append(f"memory unknown: {exc}")
        return None
    problems.extend(pressure_problems(reading, admission.high_water))
    return RedisMemory(
        used_bytes=reading.used_bytes,
        max_bytes=reading.max_bytes,
        high_water=admission.high_water,
        creates_refused=reading.past(admission.high_water),
    )
