"""Builds (issue 36): what each build's workers still have to do, and moving pinned runs
to another build.

``GET /builds`` answers a deploy script's one question — can the old build's workers
be stopped? — with ``drained``; ``POST /runs/{id}/upgrade`` and ``POST
/builds/{id}/upgrade`` move pinned runs on when the old build is gone or wrong.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from app.api.bodies import body_doc, json_body, optional_json_body
from app.api.routes.runs import RunId, State, problems
from app.builds import BUILD_ID_PATTERN
from app.errors import InvalidTransition, RunNotFound
from app.models import Run, WorkerInfo
from app.models.builds import (
    BuildInfo,
    PinnedCounts,
    UpgradeBuild,
    UpgradeRun,
    UpgradeSummary,
)
from app.store.builds.store import BuildStore, PinnedRuns
from app.store.keys import queue_of
from app.store.leases import workers

router = APIRouter(tags=["builds"])

# pinned ids read (SSCAN COUNT) and sent per upgrade_runs call
UPGRADE_PAGE = 500

BuildId = Annotated[str, Path(pattern=BUILD_ID_PATTERN, description="a build id")]


def claiming(info: WorkerInfo, queue: str) -> bool:
    """Whether a worker may claim ``queue``'s runs now (alive, not draining, serving it)."""
    return info.alive and not info.draining and queue in info.queues


async def describe(
    builds: BuildStore, build_id: str, live: list[WorkerInfo], queues: list[str]
) -> BuildInfo:
    """One build's workers and the open runs pinned to it, over the namespace's queues."""
    own = [info for info in live if info.build_id == build_id]
    pinned = PinnedRuns()
    unavailable = 0
    for queue in queues:
        await builds.pinned_runs(queue, build_id, pinned)
        if pinned.queued and not any(claiming(info, queue) for info in own):
            unavailable += await builds.waiting_on(queue, build_id)
    return BuildInfo(
        build_id=build_id,
        workers=[info.id for info in own],
        draining_workers=sum(1 for info in own if info.draining),
        running_now=sum(info.running for info in own),
        pinned=PinnedCounts(
            queued=pinned.queued,
            running=pinned.running,
            parked=pinned.parked,
            estimated=pinned.estimated,
        ),
        unavailable=unavailable,
        drained=pinned.total == 0,
    )


async def _live(state: State) -> list[WorkerInfo]:
    return await workers.list_workers(
        state.client, state.settings.data_prefix, state.settings.lease_ttl_ms
    )


async def _live_and_queues(state: State) -> tuple[list[WorkerInfo], list[str]]:
    return await _live(state), sorted(await state.store.queues())


async def unavailable_builds(state: State, queue: str) -> dict[str, int]:
    """The ready runs of ``queue`` pinned to a build none of its claiming workers has."""
    builds = BuildStore(state.store.ctx)
    pinned = await builds.pinned_builds(queue)
    if not pinned:
        return {}
    live = await _live(state)
    served = {info.build_id for info in live if claiming(info, queue)}
    counts = {build: await builds.waiting_on(queue, build) for build in pinned - served}
    return {build: n for build, n in sorted(counts.items()) if n}


@router.get("/builds", response_model=list[BuildInfo])
async def list_builds(state: State) -> list[BuildInfo]:
    """Every build a live worker runs or an open run is pinned to, with ``drained``."""
    return await every_build(state)


async def every_build(state: State) -> list[BuildInfo]:
    """The builds of the request's namespace, as GET /builds lists them (and /metrics)."""
    builds = BuildStore(state.store.ctx)
    live, queues = await _live_and_queues(state)
    known = {info.build_id for info in live if info.build_id}
    for queue in queues:
        known |= await builds.pinned_builds(queue)
    return [await describe(builds, build_id, live, queues) for build_id in sorted(known)]


@router.get("/builds/{build_id}", response_model=BuildInfo, responses=problems(422))
async def get_build(build_id: BuildId, state: State) -> BuildInfo:
    """One build; a build no worker runs and no run needs is ``drained`` with nothing in it
    (a deploy script waiting for it is done)."""
    live, queues = await _live_and_queues(state)
    return await describe(BuildStore(state.store.ctx), build_id, live, queues)


@router.post(
    "/runs/{run_id}/upgrade",
    response_model=Run,
    responses=problems(400, 404, 409, 415, 422),
    openapi_extra=body_doc(UpgradeRun, required=False),
)
async def upgrade_run(
    run_id: RunId,
    state: State,
    body: Annotated[UpgradeRun | None, Depends(optional_json_body(UpgradeRun))],
) -> Run:
    """Move a pinned run off its build: to ``build_id``, or to none (the next claim by any
    build takes it, and pins it again). An ``upgraded`` event says from and to.

    A running run finishes its attempt where it is; its next claim is the new build's.
    Unknown → 404; ended, or pinned to no build (``auto_upgrade``, or not claimed yet),
    or pinned to ``build_id`` already → 409.
    """
    queue = queue_of(run_id)
    if queue is None:
        raise RunNotFound(run_id)
    target = (body or UpgradeRun()).build_id or ""
    result = await BuildStore(state.store.ctx).upgrade(queue, [run_id], to_build=target)
    refusal = result.refused.get(run_id)
    if refusal == "not_found":
        raise RunNotFound(run_id)
    if refusal is not None:
        why = {
            "ended": "ended",
            "not_pinned": "pinned to no build",
            "not_matched": f"pinned to {target} already",
        }
        raise InvalidTransition(run_id, why[refusal], "upgrade")
    return await state.store.get(run_id)


@router.post(
    "/builds/{build_id}/upgrade",
    response_model=UpgradeSummary,
    responses=problems(400, 413, 415, 422),
    openapi_extra=body_doc(UpgradeBuild),
)
async def upgrade_build(
    build_id: BuildId,
    state: State,
    body: Annotated[UpgradeBuild, Depends(json_body(UpgradeBuild))],
) -> UpgradeSummary:
    """Move up to ``limit`` of the runs pinned to a build (filtered by ``queue`` and
    ``handler``) as POST /runs/{id}/upgrade does, each with its ``upgraded`` event.

    ``remaining`` counts the runs still pinned to the build (those the filters leave
    out included): call again until it is what you expect, or watch ``GET /builds``.
    """
    builds = BuildStore(state.store.ctx)
    queues = [body.queue] if body.queue else sorted(await state.store.queues())
    upgraded, remaining = 0, 0
    for queue in queues:
        async for ids in builds.pinned_pages(queue, build_id, UPGRADE_PAGE):
            if upgraded >= body.limit:
                break
            result = await builds.upgrade(
                queue,
                ids[: body.limit - upgraded],
                from_build=build_id,
                to_build=body.to_build_id or "",
                handler=body.handler or "",
            )
            upgraded += len(result.upgraded)
        remaining += await builds.pinned_count(queue, build_id)
    return UpgradeSummary(build_id=build_id, upgraded=upgraded, remaining=remaining)
