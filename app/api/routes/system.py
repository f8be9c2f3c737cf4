"""Handlers, workers, health and readiness."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from app.api.routes.runs import State, problems
from app.models import WORKER_ID_PATTERN, WorkerInfo
from app.models.api import HandlerInfo, ReadinessReport, RedisMemory, WorkerDrain
from app.store.admission import MemoryAdmission
from app.store.health import check_readiness
from app.store.leases import workers
from app.store.redis.memory import pressure_problems

router = APIRouter()


@router.get("/handlers", response_model=list[HandlerInfo], tags=["handlers"])
async def list_handlers(state: State) -> list[HandlerInfo]:
    """Registered handlers with the JSON schema their input must satisfy."""
    return [
        HandlerInfo(
            name=spec.name,
            description=spec.description,
            input_schema=spec.input_schema(),
            defaults=spec.defaults.model_dump(exclude_none=True),
        )
        for spec in state.registry
    ]


@router.get("/workers", response_model=list[WorkerInfo], tags=["workers"])
async def list_workers(state: State) -> list[WorkerInfo]:
    """Advertised executors; ``id`` is the ``owner_id`` they write on the runs they hold.

    A worker silent for longer than one lease TTL is ``alive: false`` (its runs
    are being reconciled) until its advertisement expires (three TTLs).
    """
    return await workers.list_workers(
        state.client, state.settings.data_prefix, state.settings.lease_ttl_ms
    )


WorkerId = Annotated[str, Path(pattern=WORKER_ID_PATTERN, description="the worker's id")]


@router.post(
    "/workers/{worker_id}/drain",
    status_code=202,
    response_model=WorkerDrain,
    responses=problems(404, 422),
    tags=["workers"],
)
async def drain_worker(worker_id: WorkerId, state: State) -> WorkerDrain:
    """Ask one worker to drain, as SIGTERM would: stop claiming, finish or release, exit.

    The worker sees the request at its next heartbeat (within a third of the
    lease TTL) and shows ``draining: true`` in ``GET /workers`` until it is gone.
    Idempotent. A worker that is not advertised → 404, and nothing is written.
    """
    if not await workers.request_drain(state.client, state.settings.data_prefix, worker_id):
        raise HTTPException(404, f"no live worker {worker_id!r} (see GET /workers)")
    return WorkerDrain(id=worker_id, drain_requested=True)


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
