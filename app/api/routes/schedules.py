"""/schedules: cron and interval schedules, pause/resume, trigger now, backfill a range.

The API only writes a schedule's record; reconcilers fire it (app/reconciler/schedule_pass.py).
A trigger or a backfill is fired here, by the same ``fire_schedule`` script, so it
honours the same overlap policy and makes at most one run per fire time.

Admission (:mod:`app.store.admission`): a create, a PATCH with a new run, a trigger
and a backfill are judged on what they will write (a backfill: all its runs
together) and refused whole past the high-water mark (503, nothing written). The
stop controls — pause, PATCH without a new run, delete — are never refused for
memory, so a schedule can be stopped when Redis is full.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.bodies import body_doc, json_body, optional_json_body
from app.api.routes.runs import State, new_run_of, problems, with_start_gates
from app.api.state import ApiState
from app.cron import InvalidSpec, Spec
from app.errors import ScheduleConflict, ScheduleLimitReached, ScheduleNotFound
from app.models import SCHEDULE_ID_PATTERN, Overlap
from app.models.api import (
    BackfillRequest,
    CreateRunRequest,
    CreateScheduleRequest,
    FireResult,
    SchedulePage,
    ScheduleSpecFields,
    TriggerRequest,
    UpdateScheduleRequest,
)
from app.models.read import Schedule
from app.settings import MAX_KEEP_S
from app.store.admission import create_cost_bytes
from app.store.codec import dumps
from app.store.ratelimits.store import start_gates_arg
from app.store.schedules.bindings import FireReply
from app.store.schedules.store import Fire, ScheduleRecord, ScheduleStore

router = APIRouter(tags=["schedules"])

ScheduleId = Annotated[str, Path(pattern=SCHEDULE_ID_PATTERN, description="the schedule's id")]
BACKFILL_CHUNK = 100


def schedule_store(state: State) -> ScheduleStore:
    """FastAPI dependency: a schedule store on the API's Redis (cheap: no I/O)."""
    return ScheduleStore.for_settings(state.client, state.scripts, state.settings)


Schedules = Annotated[ScheduleStore, Depends(schedule_store)]


def _refused(exc: Exception) -> HTTPException:
    """The problem a schedule store error is: 404 unknown, 409 conflict or limit."""
    if isinstance(exc, ScheduleNotFound):
        return HTTPException(404, str(exc))
    return HTTPException(409, str(exc))


def _spec_fields(
    body: ScheduleSpecFields, state: ApiState, *, base: ScheduleRecord | None, now_ms: int
) -> tuple[Spec, dict[str, Any]]:
    """The spec and record fields a create or update asks for; 422 for any it cannot have.

    ``base`` is the schedule being updated (its values stand where the body gives none).
    """
    settings = state.settings
    cron, timezone, interval_ms, anchor_ms = None, "UTC", None, now_ms
    if base is not None:
        cron, timezone = base.spec.cron, base.spec.timezone
        interval_ms, anchor_ms = base.spec.interval_ms, base.spec.anchor_ms
    if body.cron is not None:
        cron, interval_ms = body.cron, None
    if body.interval_s is not None:
        if not settings.schedule_interval_min_s <= body.interval_s <= MAX_KEEP_S:
            raise HTTPException(
                422,
                f"interval_s must be between {settings.schedule_interval_min_s:g} "
                f"(LEASEHOLD_SCHEDULE_INTERVAL_MIN_S) and {MAX_KEEP_S:g} s",
            )
        cron, interval_ms, anchor_ms = None, round(body.interval_s * 1000), now_ms
    if body.timezone is not None:
        timezone = body.timezone
    spec = Spec(cron=cron, timezone=timezone, interval_ms=interval_ms, anchor_ms=anchor_ms)
    try:
        spec.validate()
    except InvalidSpec as exc:
        raise HTTPException(422, str(exc)) from None
    fields: dict[str, Any] = {
        "cron": cron or "",
        "timezone": timezone,
        "interval_ms": "" if interval_ms is None else interval_ms,
        "anchor_ms": anchor_ms,
    }
    fields.update(_policy_fields(body, state))
    return spec, fields


def _policy_fields(body: ScheduleSpecFields, state: ApiState) -> dict[str, Any]:
    """The overlap, missed-fire and catch-up fields the body sets; 422 past the window bound."""
    settings = state.settings
    fields: dict[str, Any] = {}
    if body.overlap is not None:
        fields["overlap"] = body.overlap
    if body.missed is not None:
        fields["missed"] = body.missed
    if body.catchup_window_s is not None:
        if body.catchup_window_s > settings.schedule_catchup_window_max_s:
            raise HTTPException(
                422,
                f"catchup_window_s is {body.catchup_window_s:g} s; the most this deployment "
                f"allows is {settings.schedule_catchup_window_max_s:g} s "
                "(LEASEHOLD_SCHEDULE_CATCHUP_WINDOW_MAX_S)",
            )
        fields["catchup_window_ms"] = round(body.catchup_window_s * 1000)
    return fields


async def _run_fields(run: CreateRunRequest, state: ApiState) -> dict[str, Any]:
    """The run template's record fields, judged as a POST /runs body would be (4xx).

    Its rate-limit keys are resolved now, as a created run's are: every fire's run
    waits on the buckets the template named when the schedule was made or changed.
    """
    new = await with_start_gates(new_run_of(run, state, None), run.rate_limits, state)
    return {
        "queue": new.queue,
        "handler": new.handler,
        "input": new.input_json,
        "max_attempts": new.max_attempts,
        "on_lease_expired": new.on_lease_expired,
        "metadata": dumps(new.metadata),
        "budget": dumps(new.budget) if new.budget else "",
        "retention_ms": "" if new.retention_ms is None else new.retention_ms,
        "queued_ttl_ms": "" if new.queued_ttl_ms is None else new.queued_ttl_ms,
        "rate_limits": start_gates_arg(new.rate_limits),
        "run": dumps(run.model_dump(mode="json", exclude_defaults=True)),
    }


@router.post(
    "/schedules",
    status_code=201,
    response_model=Schedule,
    openapi_extra=body_doc(CreateScheduleRequest),
    responses=problems(400, 409, 413, 415, 422, 503),
)
async def create_schedule(
    body: Annotated[CreateScheduleRequest, Depends(json_body(CreateScheduleRequest))],
    state: State,
    store: Schedules,
    response: Response,
) -> Schedule:
    """Create a schedule: a cron expression in an IANA time zone, or a fixed interval.

    Every fire creates one run from ``run`` (a POST /runs body). Past
    ``LEASEHOLD_SCHEDULE_MAX`` schedules, or an id that exists → 409.
    """
    assert body.run is not None
    run_fields = await _run_fields(body.run, state)
    now = await store.now_ms()
    spec, fields = _spec_fields(body, state, base=None, now_ms=now)  # 422s before any write
    await state.queues.require(run_fields["queue"])
    await state.memory.admit(create_cost_bytes(len(run_fields["input"].encode())))
    fields.setdefault("overlap", "skip")
    fields.setdefault("missed", "skip")
    fields.setdefault("catchup_window_ms", round(state.settings.schedule_catchup_window_s * 1000))
    fields["paused"] = "1" if body.paused else "0"
    fields.update(run_fields)
    if not body.paused:
        fields["next_fire_ms"] = spec.next_after(now)
    bound, by_quota = await state.quota.bound("schedules", store.max_schedules)
    try:
        await store.create(body.id, run_fields["queue"], fields, max_schedules=bound)
    except ScheduleLimitReached as exc:
        raise (state.quota.over_count("schedules", bound) if by_quota else _refused(exc)) from None
    except ScheduleConflict as exc:
        raise _refused(exc) from None
    response.headers["Location"] = f"/schedules/{body.id}"
    return await store.get(body.id)


@router.get("/schedules", response_model=SchedulePage, responses=problems(422))
async def list_schedules(
    store: Schedules,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=SCHEDULE_ID_PATTERN)] = None,
) -> SchedulePage:
    """Schedules by id, each with its next fire times; ``next_cursor`` pages on."""
    items, next_cursor = await store.list_page(after=cursor, limit=limit)
    return SchedulePage(items=items, next_cursor=next_cursor)


@router.get("/schedules/{schedule_id}", response_model=Schedule, responses=problems(404, 422))
async def get_schedule(schedule_id: ScheduleId, store: Schedules) -> Schedule:
    """One schedule, with its next fire times (from the Redis clock), counts and last run."""
    try:
        return await store.get(schedule_id)
    except ScheduleNotFound as exc:
        raise _refused(exc) from None


async def _update(
    schedule_id: str,
    body: ScheduleSpecFields,
    state: ApiState,
    store: ScheduleStore,
    expected_version: int | None,
) -> Schedule:
    """Apply a partial update: the next fire is computed anew from now (none while paused)."""
    try:
        record = await store.record(schedule_id)
    except ScheduleNotFound as exc:
        raise _refused(exc) from None
    now = await store.now_ms()
    spec, fields = _spec_fields(body, state, base=record, now_ms=now)
    if body.run is not None:
        run_fields = await _run_fields(body.run, state)
        # a new run input grows the record: admitted like a create (a pause never is)
        await state.memory.admit(create_cost_bytes(len(run_fields["input"].encode())))
        if run_fields["queue"] != record.queue:
            raise HTTPException(
                422, f"a schedule's queue cannot change (it is {record.queue!r}); make a new one"
            )
        fields.update(run_fields)
    paused = record.paused if body.paused is None else body.paused
    fields["paused"] = "1" if paused else "0"
    if not paused:
        fields["next_fire_ms"] = spec.next_after(now)
    try:
        await store.update(
            schedule_id, fields, record.version if expected_version is None else expected_version
        )
    except (ScheduleNotFound, ScheduleConflict) as exc:
        raise _refused(exc) from None
    return await store.get(schedule_id)


@router.patch(
    "/schedules/{schedule_id}",
    response_model=Schedule,
    openapi_extra=body_doc(UpdateScheduleRequest),
    responses=problems(400, 404, 409, 413, 415, 422, 503),
)
async def update_schedule(
    schedule_id: ScheduleId,
    body: Annotated[UpdateScheduleRequest, Depends(json_body(UpdateScheduleRequest))],
    state: State,
    store: Schedules,
) -> Schedule:
    """Change a schedule; fires before the change are not replayed (next fire from now).

    With ``version``, a schedule changed since → 409.
    """
    return await _update(schedule_id, body, state, store, body.version)


@router.post(
    "/schedules/{schedule_id}/pause", response_model=Schedule, responses=problems(404, 409, 422)
)
async def pause_schedule(schedule_id: ScheduleId, state: State, store: Schedules) -> Schedule:
    """Pause: nothing fires and nothing is counted missed until it is resumed."""
    return await _update(schedule_id, ScheduleSpecFields(paused=True), state, store, None)


@router.post(
    "/schedules/{schedule_id}/resume", response_model=Schedule, responses=problems(404, 409, 422)
)
async def resume_schedule(schedule_id: ScheduleId, state: State, store: Schedules) -> Schedule:
    """Resume: it fires from its next fire time after now; the paused span is not replayed."""
    return await _update(schedule_id, ScheduleSpecFields(paused=False), state, store, None)


@router.delete("/schedules/{schedule_id}", status_code=204, responses=problems(404, 422))
async def delete_schedule(schedule_id: ScheduleId, store: Schedules) -> Response:
    """Delete a schedule: nothing more fires. The runs it made stay."""
    try:
        await store.delete(schedule_id)
    except ScheduleNotFound as exc:
        raise _refused(exc) from None
    return Response(status_code=204)


def _result(replies: list[FireReply]) -> FireResult:
    return FireResult(
        created=[run_id for reply in replies for run_id in reply.created],
        skipped=sum(reply.skipped for reply in replies),
        buffered=any(reply.buffered for reply in replies),
        cancelled=[run_id for reply in replies for run_id in reply.cancelled],
    )


async def _fire(
    store: ScheduleStore,
    record: ScheduleRecord,
    mode: str,
    fires: list[int],
    overlap: Overlap | None,
) -> list[FireReply]:
    replies = []
    for i in range(0, len(fires), BACKFILL_CHUNK):
        fire = Fire(mode, fires[i : i + BACKFILL_CHUNK], record.version, overlap=overlap)
        reply = await store.fire(record, fire)
        if reply.code != "OK":
            raise HTTPException(409, f"schedule {record.id!r} changed meanwhile; try again")
        replies.append(reply)
    return replies


@router.post(
    "/schedules/{schedule_id}/trigger",
    response_model=FireResult,
    status_code=201,
    openapi_extra=body_doc(TriggerRequest, required=False),
    responses={
        200: {"model": FireResult, "description": "no run: overlap"},
        **problems(400, 404, 409, 413, 415, 422, 503),
    },
)
async def trigger_schedule(
    schedule_id: ScheduleId,
    body: Annotated[TriggerRequest | None, Depends(optional_json_body(TriggerRequest))],
    store: Schedules,
    state: State,
    response: Response,
) -> FireResult:
    """Fire now, once, as the schedule would (its overlap policy, or the one given).

    201 with the run created; 200 when the policy skipped or buffered it. Works while paused.
    """
    record = await _record(store, schedule_id)
    await state.memory.admit(create_cost_bytes(len(record.fields.get("input", "").encode())))
    await state.quota.admit_runs(1)
    now = await store.now_ms()
    result = _result(await _fire(store, record, "trigger", [now], body.overlap if body else None))
    response.status_code = 201 if result.created else 200
    return result


async def _record(store: ScheduleStore, schedule_id: str) -> ScheduleRecord:
    try:
        return await store.record(schedule_id)
    except ScheduleNotFound as exc:
        raise _refused(exc) from None


@router.post(
    "/schedules/{schedule_id}/backfill",
    response_model=FireResult,
    openapi_extra=body_doc(BackfillRequest),
    responses=problems(400, 404, 409, 413, 415, 422, 503),
)
async def backfill_schedule(
    schedule_id: ScheduleId,
    body: Annotated[BackfillRequest, Depends(json_body(BackfillRequest))],
    store: Schedules,
    state: State,
) -> FireResult:
    """Fire every fire time of the spec in [start, end], oldest first, now.

    Ignores the catch-up window and pause; overlap is ``allow`` unless the body says
    otherwise. A fire whose run exists already (a repeated backfill, or one the
    schedule made) is skipped: still one run per fire time. More fire times than
    ``LEASEHOLD_SCHEDULE_BACKFILL_MAX_FIRES`` → 422, nothing fired.
    """
    record = await _record(store, schedule_id)
    bound = state.settings.schedule_backfill_max_fires
    start_ms = max(0, round(body.start.timestamp() * 1000))  # fire times are epoch ms >= 0
    end_ms = round(body.end.timestamp() * 1000)
    fires = record.spec.between(start_ms - 1, end_ms, bound + 1)
    if len(fires) > bound:
        raise HTTPException(
            422,
            f"the range holds more than {bound} fire times "
            "(LEASEHOLD_SCHEDULE_BACKFILL_MAX_FIRES); backfill a shorter range",
        )
    cost = create_cost_bytes(len(record.fields.get("input", "").encode())) * max(1, len(fires))
    await state.memory.admit(cost)
    await state.quota.admit_runs(max(1, len(fires)))  # all or nothing, like the memory
    return _result(await _fire(store, record, "backfill", fires, body.overlap or "allow"))
