"""/runs: create, read, list, cancel, resolve, delete and purge runs."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response
from redis.exceptions import RedisError

from app.api.bodies import body_doc, json_body
from app.api.problems import PROBLEM_JSON
from app.api.state import ApiState, state_dependency
from app.api.streaming import admit_stream, event_stream_response, live_sink, run_events
from app.errors import HistoryTooLarge, InvalidTransition, RunNotFound, VersionDrift
from app.models import (
    HANDLER_NAME_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    QUEUE_NAME_PATTERN,
    RUN_ID_PATTERN,
    Run,
    RunStatus,
)
from app.models.api import CreateRunRequest, Problem, StatusChange
from app.models.history import HISTORY_MAX_EVENTS, RunHistory
from app.models.keys import Role
from app.models.read import PurgeRequest, PurgeResult, ResolveRequest, RunPage
from app.store.admission import create_cost_bytes
from app.store.builds.store import BuildStore
from app.store.codec import LARGE_FIELDS, dumps_parsed
from app.store.keys import queue_of
from app.store.ratelimits.store import StartGate
from app.store.runs.history import RunHistoryReader
from app.store.runs.listing import ScanBudget
from app.store.runs.new import NewRun, metadata_bytes
from app.telemetry.metrics import RUNS_CREATED, RUNS_DELETED
from app.telemetry.tracing import Span, parse_traceparent, tracer

if TYPE_CHECKING:
    from app.handlers import HandlerSpec
    from app.settings import Settings

log = logging.getLogger(__name__)

router = APIRouter(tags=["runs"])

State = Annotated[ApiState, Depends(state_dependency)]
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="`<queue>.<ULID>`")]


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Problem, "content": {PROBLEM_JSON: {}}} for code in codes}


def new_run_of(
    body: CreateRunRequest,
    state: ApiState,
    idempotency_key: str | None,
    traceparent: str | None = None,
) -> NewRun:
    """Validate a create request against settings and the handler; raises on bad input.

    Bad input is a 4xx even while Redis is full: this runs before admission.
    ``traceparent`` (already validated) is kept with the run for its workers' spans.
    The checks come in this order (a request wrong in two ways gets the first):
    the input's size (413), the metadata's size (422), the handler (422), its input
    (422), the options (422).
    """
    if idempotency_key and body.idempotency_key and idempotency_key != body.idempotency_key:
        raise HTTPException(400, "the Idempotency-Key header and the idempotency_key field differ")
    encoded_input = encoded_input_of(body.input, state.settings.max_input_bytes)
    check_metadata_size(body.metadata, state.settings.max_metadata_bytes)
    spec = state.registry.get(body.handler)
    spec.parse_input(body.input)
    return NewRun(
        input=body.input,
        idempotency_key=idempotency_key or body.idempotency_key,
        metadata=body.metadata,
        traceparent=traceparent,
        encoded_input=encoded_input,
        **run_options(body, spec, state.settings),
    )


def encoded_input_of(value: Any, max_input_bytes: int) -> str:
    """The input (parsed from a request's JSON) as stored, encoded once, here; 413 past
    ``max_input_bytes`` of UTF-8."""
    encoded = dumps_parsed(value)
    # an ASCII text's length is its UTF-8 size: most inputs need no second encoding
    size = len(encoded) if encoded.isascii() else len(encoded.encode())
    if size > max_input_bytes:
        raise HTTPException(413, f"input is {size} bytes; the limit is {max_input_bytes}")
    return encoded


def check_metadata_size(metadata: dict[str, Any], max_metadata_bytes: int) -> None:
    """422 when ``metadata`` weighs more than ``max_metadata_bytes`` as stored
    (:func:`~app.store.runs.new.metadata_bytes`); empty metadata is not encoded."""
    if not metadata:
        return
    size = metadata_bytes(metadata)
    if size > max_metadata_bytes:
        raise HTTPException(
            422,
            f"metadata is {size} bytes of JSON; the limit is {max_metadata_bytes} "
            "(LEASEHOLD_MAX_METADATA_BYTES)",
        )


def run_options(body: CreateRunRequest, spec: HandlerSpec, settings: Settings) -> dict[str, Any]:
    """The :class:`NewRun` fields a request's options resolve to: all but its input,
    idempotency key, metadata and trace; raises 422 for an option past its bound.

    Run options > handler defaults > settings (app/handlers.py). A batch resolves
    them once for all its items that ask for the same options (app/api/routes/batch_items.py).
    """
    retention_ms = _bounded_ms(body.retention_s, "retention_s", settings.retention_max_s)
    queued_ttl_ms = _bounded_ms(body.queued_ttl_s, "queued_ttl_s", settings.queued_ttl_max_s)
    start_at_ms, delay_ms = start_of(body, settings.start_max_ahead_s)
    return {
        "handler": body.handler,
        "queue": body.queue,
        "max_attempts": body.max_attempts
        or spec.defaults.max_attempts
        or settings.default_max_attempts,
        "on_lease_expired": body.on_lease_expired
        or spec.defaults.on_lease_expired
        or settings.default_on_lease_expired,
        "budget": spec.defaults.merged_budget(
            body.budget.model_dump(exclude_none=True) if body.budget else None
        ),
        "retention_ms": retention_ms,
        "queued_ttl_ms": queued_ttl_ms,
        "start_at_ms": start_at_ms,
        "delay_ms": delay_ms,
        "concurrency_key": body.concurrency_key,
        "singleton_key": body.singleton_key,
        "on_conflict": body.on_conflict,
        "priority": body.priority,
        "boost_ms": priority_boost_ms(body.priority, settings.priority_aging_step_s),
        "versioning": spec.defaults.pinned(body.versioning, settings.default_versioning),
    }


def start_of(body: CreateRunRequest, max_ahead_s: float) -> tuple[int | None, int | None]:
    """A create's delayed start as (start_at_ms, delay_ms); 422 past the furthest allowed.

    A delayed run is held in Redis until its time, so how far ahead is a setting.
    ``run_at`` is judged against this API's clock (the script starts it against
    Redis's); a time in the past starts at once.
    """
    if body.delay_s is not None:
        return None, _ahead_ms(body.delay_s, "delay_s", max_ahead_s)
    if body.run_at is None:
        return None, None
    ahead_s = body.run_at.timestamp() - time.time()
    _ahead_ms(max(0.0, ahead_s), "run_at", max_ahead_s)
    return max(0, round(body.run_at.timestamp() * 1000)), None


def _ahead_ms(seconds: float, name: str, max_ahead_s: float) -> int:
    if seconds > max_ahead_s:
        raise HTTPException(
            422,
            f"{name} puts the start {seconds:g} s ahead; the most this deployment allows is "
            f"{max_ahead_s:g} s (LEASEHOLD_START_MAX_AHEAD_S)",
        )
    return round(seconds * 1000)


async def with_start_gates(new: NewRun, names: list[str], state: ApiState) -> NewRun:
    """``new`` with the start gates its ``rate_limits`` name, resolved now.

    Raises :class:`RateLimitNotDeclared` (422) for a key no declaration covers, and
    422 for a key named twice. The spec is fixed on the run when it is created.
    """
    if not names:
        return new
    if len(set(names)) != len(names):
        raise HTTPException(422, "rate_limits names a key twice")
    gates = [StartGate.of(await state.rate_limits.resolve(name)) for name in names]
    return dataclasses.replace(new, rate_limits=tuple(gates))


def priority_boost_ms(priority: int, aging_step_s: float) -> int:
    """How far ahead of its enqueue time a run of ``priority`` is placed in its lane, in ms.

    Why a boost and not a separate order: aging is then free. A run's lane score is
    its enqueue ms minus this, so a later run of priority p passes an earlier run of
    priority q only while it arrived less than (p - q) x the step after it.
    """
    return round(priority * aging_step_s * 1000)


def _bounded_ms(seconds: float | None, name: str, max_s: float) -> int | None:
    """A per-run duration in ms, refused (422) past its setting's bound.

    One caller must not pin its runs in Redis for ever: the bound is a setting.
    """
    if seconds is None:
        return None
    if seconds > max_s:
        raise HTTPException(
            422, f"{name} is {seconds:g} s; the most this deployment allows is {max_s:g} s"
        )
    return max(1, round(seconds * 1000))


CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": Run, "description": "idempotent replay"},
    201: {
        "model": Run,
        "description": (
            "created; with `Accept: text/event-stream` the body is the run's event "
            "stream (see GET /runs/{id}/events)"
        ),
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **problems(400, 409, 413, 415, 422, 503),
}


@router.post(
    "/runs",
    status_code=201,
    response_model=Run,
    openapi_extra=body_doc(CreateRunRequest),
    responses=CREATE_RESPONSES,
)
async def create_run(
    body: Annotated[CreateRunRequest, Depends(json_body(CreateRunRequest))],
    request: Request,
    response: Response,
    state: State,
    idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY_PATTERN)] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context: the run's spans join this trace (a malformed "
            "value is ignored, as the W3C spec requires, and a new trace starts)"
        ),
    ] = None,
) -> Run | Response:
    """Create a run, detached from this request; it is queued for any worker.

    The same idempotency key with the same body returns the existing run (200,
    ``Idempotency-Replayed: true``); with another body it is a 409. With
    ``Accept: text/event-stream`` the response streams the run's events; the run
    does not depend on that connection unless ``cancel_on_disconnect`` is true.
    While Redis memory is past ``LEASEHOLD_MEMORY_HIGH_WATER`` it answers 503
    ``admission-refused`` with ``Retry-After``, and writes nothing.
    """
    caller = parse_traceparent(traceparent)
    attributes = {"leasehold.handler": body.handler, "leasehold.queue": body.queue}
    with tracer().span("leasehold.create", attributes, parent=caller, root=True) as span:
        # the create span's context when tracing here, else the caller's: workers continue it
        new = new_run_of(body, state, idempotency_key, span.traceparent or caller)
        return await _create(new, body, request, response, state, span)


async def _create(
    new: NewRun,
    body: CreateRunRequest,
    request: Request,
    response: Response,
    state: ApiState,
    span: Span,
) -> Run | Response:
    await state.queues.require(new.queue)  # 422 naming the declared ones; never declares
    new = await with_start_gates(new, body.rate_limits, state)
    # before a stream slot is taken: a refusal holds nothing
    await state.memory.admit(create_cost_bytes(len(new.input_json.encode())))
    await state.quota.admit_runs(1)
    streaming = "text/event-stream" in request.headers.get("accept", "")
    if streaming:
        admit_stream(state, None)  # before the create: a refusal changes nothing
    try:
        created = await state.store.create(new)
        await state.queues.keep_declared([new.queue])  # an undeclare raced it: the run wins
    except BaseException:
        if streaming:
            state.slots.give_back()
        raise
    span.set_attributes(
        {"leasehold.run_id": created.run.id, "leasehold.replayed": created.replayed}
    )
    headers = {"Location": f"/runs/{created.run.id}"}
    if created.replayed:
        headers["Idempotency-Replayed"] = "true"
    else:
        RUNS_CREATED.labels(state.metric_queue(created.run.queue), created.run.handler).inc()
    status = 200 if created.replayed else 201
    if streaming:
        # a follower dropped as slow must not look like one that left (and cancel the run)
        sink = None if body.cancel_on_disconnect else live_sink(state, request.scope)
        stream = run_events(
            state.store,
            state.hub,
            created.run.id,
            after=None,
            retry_ms=state.settings.sse_retry_ms,
            sink=sink,
        )
        if body.cancel_on_disconnect:
            stream = cancel_if_abandoned(state, created.run.id, stream)
        return event_stream_response(
            state, created.run, stream, status_code=status, headers=headers, sink=sink
        )
    response.status_code = status
    response.headers.update(headers)
    return created.run


async def cancel_if_abandoned(
    state: ApiState, run_id: str, stream: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """Pass the stream through; if the client leaves before the end, cancel the run.

    The cancel runs as a detached task: the disconnect cancels this generator, and
    the request to cancel must not be cancelled with it.
    """
    completed = False
    try:
        async for message in stream:
            yield message
        completed = True
    finally:
        if not completed:
            state.detach(asyncio.create_task(_cancel_quietly(state, run_id)))


async def _cancel_quietly(state: ApiState, run_id: str) -> None:
    try:
        await state.store.cancel(run_id)
    except (InvalidTransition, RunNotFound):
        pass  # it ended on its own meanwhile
    except (RedisError, OSError) as exc:
        log.warning("cancel on disconnect failed: %s", exc, extra={"run_id": run_id})


@router.get("/runs/{run_id}", response_model=Run, responses=problems(404, 422))
async def get_run(run_id: RunId, state: State) -> Run:
    """The run, found by id alone (the id names its queue)."""
    return await state.store.get(run_id)


@router.get("/runs/{run_id}/history", response_model=RunHistory, responses=problems(404, 413, 422))
async def get_run_history(
    run_id: RunId,
    state: State,
    max_events: Annotated[int, Query(ge=0, le=HISTORY_MAX_EVENTS)] = HISTORY_MAX_EVENTS,
) -> RunHistory:
    """What a replay of the run needs (``app.testing.replay``): its record, step log, step
    records as stored, and its first ``max_events`` events (``events_truncated`` says when
    there are more). 413 when its step records are too many for one document."""
    try:
        return await RunHistoryReader(state.store.ctx).read(run_id, max_events=max_events)
    except HistoryTooLarge as exc:
        raise HTTPException(413, str(exc)) from None


def _included(request: Request) -> frozenset[str]:
    """The large fields ``?include=`` asks for; an unknown name is a 422.

    Every ``include`` parameter counts (``include=input&include=output`` is both): the
    query declaration alone would keep only the last and silently drop the others.
    """
    values = request.query_params.getlist("include")
    names = frozenset(name.strip() for value in values for name in value.split(",") if name.strip())
    unknown = sorted(names - set(LARGE_FIELDS))
    if unknown:
        raise HTTPException(
            422, f"include names unknown fields {unknown}; it takes {', '.join(LARGE_FIELDS)}"
        )
    return names


METADATA_PARAM = "metadata."
METADATA_FILTERS_MAX = 8
METADATA_KEY = re.compile(r"[A-Za-z0-9_\-]{1,64}")
METADATA_VALUE_MAX = 256


def _metadata_filters(request: Request) -> dict[str, str]:
    """The ``metadata.<key>=<value>`` query parameters; 422 past the bounds.

    At most ``METADATA_FILTERS_MAX`` keys, each ``[A-Za-z0-9_-]{1,64}`` and given
    once, values up to ``METADATA_VALUE_MAX`` characters: a filter costs the scan
    it narrows, never more.
    """
    filters: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if not name.startswith(METADATA_PARAM):
            continue
        key = name[len(METADATA_PARAM) :]
        if not METADATA_KEY.fullmatch(key):
            raise HTTPException(
                422, f"metadata filter key {key[:80]!r} must match [A-Za-z0-9_-]{{1,64}}"
            )
        if key in filters:
            raise HTTPException(422, f"metadata filter {key!r} is given more than once")
        if len(value) > METADATA_VALUE_MAX:
            raise HTTPException(
                422,
                f"metadata filter {key!r} is {len(value)} characters; at most {METADATA_VALUE_MAX}",
            )
        filters[key] = value
        if len(filters) > METADATA_FILTERS_MAX:
            raise HTTPException(422, f"at most {METADATA_FILTERS_MAX} metadata filters")
    return filters


@router.get("/runs", response_model=RunPage, responses=problems(400, 422))
async def list_runs(
    request: Request,
    state: State,
    queue: Annotated[str | None, Query(pattern=QUEUE_NAME_PATTERN)] = None,
    status: RunStatus | None = None,
    handler: Annotated[str | None, Query(pattern=HANDLER_NAME_PATTERN)] = None,
    parent_id: Annotated[
        str | None, Query(pattern=RUN_ID_PATTERN, description="only this run's children")
    ] = None,
    root_id: Annotated[
        str | None,
        Query(pattern=RUN_ID_PATTERN, description="only the runs of this top-level run's tree"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
    include: Annotated[
        str | None,
        Query(
            max_length=64,
            description="comma-separated large fields to return too: input, output, metadata",
        ),
    ] = None,
) -> Response:
    """Runs newest first, as summaries; pass ``next_cursor`` back as ``cursor`` for more.

    Items omit ``input``, ``output`` and ``metadata`` unless ``include`` names them.
    A page stops early, with a ``next_cursor``, once it holds
    ``LEASEHOLD_LIST_MAX_BYTES`` of runs, so a list costs what it returns; and
    once the call has read ``LEASEHOLD_LIST_SCAN_BUDGET_BYTES`` of records or looked
    at ``LEASEHOLD_LIST_SCAN_BUDGET_RUNS`` runs, so a filter that matches little costs
    a bounded read: then ``truncated`` is ``scan_budget`` (the page may be empty) and
    following ``next_cursor`` to ``null`` still gives every match once.
    ``metadata.<key>=<value>`` (up to 8, all must hold) keeps runs whose metadata
    has that key with that value: a string as is, a number or boolean as JSON
    (``metadata.tenant=acme``, ``metadata.priority=3``). ``parent_id`` keeps a
    run's children, ``root_id`` every run of a tree (the top-level run included).
    """
    included = _included(request)
    metadata = _metadata_filters(request)
    async with state.quota.listing():  # the namespace's listings_in_flight (429 past it)
        page = await state.store.list_runs(
            queue=queue,
            status=status,
            handler=handler,
            limit=limit,
            cursor=cursor,
            include=included,
            max_bytes=state.settings.list_max_bytes,
            budget=ScanBudget.for_settings(state.settings),
            among=None if queue else await state.queues.declared(),
            metadata=metadata,
            parent_id=parent_id,
            root_id=root_id,
        )
    omitted = {name for name in LARGE_FIELDS if name not in included}
    return Response(
        page.model_dump_json(exclude={"items": {"__all__": omitted}}),
        media_type="application/json",
    )


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    response_model=StatusChange,
    responses=problems(404, 409, 422),
)
async def cancel_run(run_id: RunId, state: State) -> StatusChange:
    """Ask a run to stop. Idempotent.

    A queued (or parked) run is cancelled at once. A running run becomes
    ``cancelling``; its owner stops it within one heartbeat, or the reconciler
    finalizes it if the owner is dead.
    """
    status = await state.store.cancel(run_id)
    return StatusChange(id=run_id, status=status)


@router.post(
    "/runs/{run_id}/resolve",
    response_model=Run,
    responses=problems(400, 404, 409, 413, 415, 422),
    openapi_extra=body_doc(ResolveRequest),
)
async def resolve_run(
    run_id: RunId,
    body: Annotated[ResolveRequest, Depends(json_body(ResolveRequest))],
    state: State,
    request: Request,
) -> Run:
    """Decide what happens to a run parked in ``reconciliation_required``.

    The decision becomes a ``resolved`` event. ``effect_outcome`` settles the effects
    whose outcome was unknown (``applied``: recorded as done, with ``effect_result``;
    ``not_applied``: dropped, so they run again). ``retry`` queues the run again
    (fence+1; it resumes from its checkpoint and replays recorded effects), ``fail``
    ends it failed, ``succeed`` ends it succeeded with ``output``. Any other status → 409.
    A run parked for ``version_drift`` (its code changed under it) is retried without
    ``effect_outcome``: the step order it recorded is forgotten and it goes on under the
    code it meets, its recorded effects replayed by name and number. ``upgrade: true``
    (operate role) first moves a pinned run off its build: upgrade and retry.
    """
    if body.upgrade:
        run = await upgrade_before_retry(request, state, run_id)
    else:
        run = await state.store.get(run_id)
    if body.action == "retry" and body.effect_outcome is None:
        error = run.error
        if error is None or error.code != VersionDrift.code:
            raise HTTPException(
                422,
                "retry needs effect_outcome (applied or not_applied): without it the run "
                "would stop at the same effect again",
            )
    return await state.store.resolve(run_id, body)


async def upgrade_before_retry(request: Request, state: ApiState, run_id: str) -> Run:
    """Resolve's ``upgrade``: move the parked run off its pinned build before its retry.

    Moving a run between builds is the operate role's (as ``POST /runs/{id}/upgrade``),
    so a submit key may retry but not upgrade (403); a run that is not parked for
    reconciliation is left as it is (the resolve then answers 409); one that is not
    pinned needs no upgrade. Returns the run as it was read before the upgrade.
    """
    key = getattr(request.state, "key", None)
    if key is not None and not key.role.allows(Role.OPERATE):
        raise HTTPException(
            403, f"upgrade needs a key with the 'operate' role; the key has {key.role.value!r}"
        )
    run = await state.store.get(run_id)
    if run.status == RunStatus.RECONCILIATION_REQUIRED and run.pinned_build is not None:
        await BuildStore(state.store.ctx).upgrade(run.queue, [run.id])
    return run


@router.delete("/runs/{run_id}", status_code=204, responses=problems(404, 409, 422))
async def delete_run(run_id: RunId, state: State) -> Response:
    """Delete a finished run now: its record, events, effects and idempotency key.

    Only a terminal run (succeeded, failed, cancelled, orphaned, expired) can be
    deleted; any other status → 409 and nothing changes. So is one whose end has not
    reached its family yet (a child's outcome its parent has not recorded, a parent's
    end its children have not had): the delivery reads the record, and a join would
    otherwise wait for ever; it is deletable once the outbox delivers it. Unknown, already deleted
    or expired → 404. Without a delete, a finished run goes when its retention ends.
    """
    await state.store.delete(run_id)
    RUNS_DELETED.labels(state.metric_queue(queue_of(run_id) or ""), "delete").inc()
    return Response(status_code=204)


@router.post(
    "/runs/purge",
    response_model=PurgeResult,
    responses=problems(400, 413, 415, 422),
    openapi_extra=body_doc(PurgeRequest),
)
async def purge_runs(
    body: Annotated[PurgeRequest, Depends(json_body(PurgeRequest))], state: State
) -> PurgeResult:
    """Delete the finished runs matching the filters, one bounded batch per call.

    Filters: ``queue``, ``status`` (terminal only, else 422), ``handler``,
    ``finished_before`` (RFC 3339 with a zone). A call looks at up to ``limit``
    runs (at most ``LEASEHOLD_PURGE_BATCH_MAX``, else 422), newest first, deletes
    the terminal ones that match and says which; pass ``next_cursor`` back as
    ``cursor`` until ``done``. A run that is not terminal is never deleted, even
    one a worker claims meanwhile, and repeating a call is safe.
    """
    batch_max = state.settings.purge_batch_max
    if body.limit > batch_max:
        raise HTTPException(
            422, f"limit is {body.limit}; the most one purge call may look at is {batch_max}"
        )
    await state.queues.announce_configured()  # a fresh API's own queues are searched too
    result = await state.store.purge(body, ScanBudget.for_settings(state.settings))
    for run_id in result.ids:
        RUNS_DELETED.labels(state.metric_queue(queue_of(run_id) or ""), "purge").inc()
    return result
