"""GET /metrics: Prometheus exposition of this API process, plus queue depth."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.routes.runs import State
from app.metrics import OLDEST_QUEUED_AGE, QUEUE_DEPTH, QUEUE_RUNS_STORED

router = APIRouter(tags=["health"])

METRICS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Prometheus text format",
        "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", response_class=Response, responses=METRICS_DOC)
async def metrics(state: State) -> Response:
    """Counters and gauges of this process; queue depth and Redis memory are read now."""
    await state.memory.refresh()
    for queue in await state.queues.declared():
        depth = await state.queues.depth(queue)
        QUEUE_RUNS_STORED.labels(queue).set(depth.stored)
        QUEUE_DEPTH.labels(queue, "ready").set(depth.ready)
        QUEUE_DEPTH.labels(queue, "delayed").set(depth.delayed)
        QUEUE_DEPTH.labels(queue, "leased").set(depth.leased)
        QUEUE_DEPTH.labels(queue, "parked").set(depth.parked)
        OLDEST_QUEUED_AGE.labels(queue).set(depth.oldest_queued_age_s)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
