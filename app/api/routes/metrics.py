"""GET /metrics: Prometheus exposition of this API process, plus queue depth.

Every series labelled with a queue exists while the queue is declared: each scrape
drops those of queues no longer declared (undeclared here or by another process), so
declaring and undeclaring made-up queues cannot grow the exposition without bound.

The exposition is the process's, and a process serves every namespace: a scrape reads
the depth of the namespace it addresses (``Leasehold-Namespace``), and a queue of any
namespace but ``default`` is labelled ``<namespace>/<queue>`` (never a queue's own
name: ``/`` is not allowed in one). It shows every namespace's series this process
has, so a key bound to one namespace may not scrape it (403, ``app.api.scopes``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from app.api.routes.builds import every_build
from app.api.routes.runs import State
from app.models.read import QueueFlow
from app.store.leases.workers import list_workers
from app.store.queues.store import QueueDepth
from app.telemetry.metrics import (
    API_KEYS_LIVE,
    API_REGISTRY,
    BUILD_RUNS,
    BUILD_WORKERS,
    LIVE_WORKERS,
    OLDEST_QUEUED_AGE,
    QUEUE_DEPTH,
    QUEUE_RUNS_STORED,
    RESOURCES_WAITED_ON,
    RUNS_CREATED,
    RUNS_DELETED,
    SLOTS_LIMIT,
    SLOTS_USED,
)

router = APIRouter(tags=["health"])

# this process's series with a "queue" label (SLOTS_* are cleared whole at each scrape)
QUEUE_LABELLED: tuple[MetricWrapperBase, ...] = (
    RUNS_CREATED,
    RUNS_DELETED,
    QUEUE_DEPTH,
    LIVE_WORKERS,
    OLDEST_QUEUED_AGE,
    QUEUE_RUNS_STORED,
    RESOURCES_WAITED_ON,
)

METRICS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Prometheus text format",
        "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", response_class=Response, responses=METRICS_DOC)
async def metrics(state: State) -> Response:
    """Counters and gauges of this process; depth, workers, keys and Redis memory are read
    now."""
    await state.memory.refresh()
    API_KEYS_LIVE.set(await state.keyring.store.count())
    serving = Counter(
        queue
        for worker in await list_workers(
            state.client, state.settings.data_prefix, state.settings.lease_ttl_ms
        )
        if worker.alive  # silent past one lease TTL: its runs are being taken from it
        for queue in worker.queues
    )
    SLOTS_USED.clear()  # a limit removed since the last scrape leaves no stale series
    SLOTS_LIMIT.clear()
    declared = await state.queues.declared()
    forget_queues_but({state.metric_queue(queue) for queue in declared}, state.metric_queue(""))
    for queue in declared:
        _export_depth(state.metric_queue(queue), await state.queues.depth(queue), serving[queue])
        flow = await state.flow.flow(queue, state.settings.queue_top_keys)
        _export_flow(state.metric_queue(queue), flow)
    await _export_builds(state)
    return Response(generate_latest(API_REGISTRY), media_type=CONTENT_TYPE_LATEST)


def _export_depth(queue: str, depth: QueueDepth, workers: int) -> None:
    """One queue's backlog and the live workers serving it, labelled ``queue``."""
    LIVE_WORKERS.labels(queue).set(workers)
    QUEUE_RUNS_STORED.labels(queue).set(depth.stored)
    QUEUE_DEPTH.labels(queue, "ready").set(depth.ready)
    QUEUE_DEPTH.labels(queue, "delayed").set(depth.delayed)
    QUEUE_DEPTH.labels(queue, "waiting").set(depth.waiting)
    QUEUE_DEPTH.labels(queue, "leased").set(depth.leased)
    QUEUE_DEPTH.labels(queue, "parked").set(depth.parked)
    OLDEST_QUEUED_AGE.labels(queue).set(depth.oldest_queued_age_s)
    SLOTS_USED.labels(queue, "queue", "").set(depth.leased)


async def _export_builds(state: State) -> None:
    """Each build's pinned runs by state and its live workers (issue 36), labelled like
    queues (``<namespace>/<build>`` outside ``default``); cleared first, so a build gone
    since the last scrape leaves no series."""
    BUILD_RUNS.clear()
    BUILD_WORKERS.clear()
    for build in await every_build(state):
        label = state.metric_queue(build.build_id)
        BUILD_WORKERS.labels(label).set(len(build.workers))
        pinned = build.pinned
        for name, value in (
            ("queued", pinned.queued),
            ("running", pinned.running),
            ("parked", pinned.parked),
            ("unavailable", build.unavailable),
        ):
            BUILD_RUNS.labels(label, name).set(value)


def forget_queues_but(declared: set[str], namespace_label: str = "") -> None:
    """Drop every queue-labelled series of this namespace's queues not in ``declared``.

    ``namespace_label``: how this namespace's labels begin (``""`` for ``default``,
    whose labels have no ``/``; ``<namespace>/`` for any other): another namespace's
    series are that namespace's scrape's to drop.
    """
    for metric in QUEUE_LABELLED:
        shown = {sample.labels["queue"] for family in metric.collect() for sample in family.samples}
        for queue in shown - declared:
            ours = queue.startswith(namespace_label) if namespace_label else "/" not in queue
            if ours:
                metric.remove_by_labels({"queue": queue})


def _export_flow(queue: str, flow: QueueFlow) -> None:
    """Slots and limits with bounded labels: only handlers and keys that have a limit."""
    limits = flow.limits
    if limits.queue is not None:
        SLOTS_LIMIT.labels(queue, "queue", "").set(limits.queue)
    if limits.default_key is not None:
        SLOTS_LIMIT.labels(queue, "key", "*").set(limits.default_key)
    for usage in flow.handlers:
        if usage.limit is not None:
            SLOTS_USED.labels(queue, "handler", usage.handler).set(usage.running)
            SLOTS_LIMIT.labels(queue, "handler", usage.handler).set(usage.limit)
    for key_usage in flow.limited_keys:
        SLOTS_USED.labels(queue, "key", key_usage.key).set(key_usage.running)
        SLOTS_LIMIT.labels(queue, "key", key_usage.key).set(key_usage.limit or 0)
    SLOTS_USED.labels(queue, "keys", "").set(flow.key_slots)
    RESOURCES_WAITED_ON.labels(queue).set(flow.blocked)
