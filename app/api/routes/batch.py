"""POST /runs/batch: many runs in one request and one pipeline, each with its own outcome.

Every item is judged exactly as ``POST /runs`` judges a body (the same content
rule, schema, handler, input size, retention bounds and declared queue) but on
its own: an invalid item is refused in its place with the problem the single
create would have answered, and nothing is written for it; the valid ones are
created. What only the whole request can be refused for, it is: a body that is
not JSON (400/415), larger than the body limit or with more than
``LEASEHOLD_BATCH_MAX_ITEMS`` items (413), an ``Idempotency-Key`` header (400:
each item carries its own ``idempotency_key``), and Redis memory past the
high-water mark (503 ``admission-refused`` with ``Retry-After``, nothing
written: the batch is admitted whole or not at all).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError

from app.api.bodies import body_doc, raw_json_body
from app.api.routes.batch_items import BatchJudge
from app.api.routes.runs import problems, with_start_gates
from app.api.state import ApiState, api_state
from app.errors import QueueNotDeclared, RateLimitNotDeclared
from app.models.api import CreateRunsRequest, CreateRunsResult
from app.store.admission import create_cost_bytes
from app.store.runs.answers import AnswerShapes, Created
from app.store.runs.new import NewRun
from app.telemetry.metrics import RUNS_CREATED

router = APIRouter(tags=["runs"])

State = Annotated[ApiState, Depends(api_state)]

# every item outcome is the JSON text of {"status", "run"} or {"status", "problem"}
Outcome = str


async def _batch_items(request: Request) -> list[object]:
    """The body's ``items``, each still unjudged; the whole request's refusals first."""
    if request.headers.get("idempotency-key") is not None:
        raise HTTPException(
            400, "a batch takes no Idempotency-Key header: give each item its idempotency_key"
        )
    data = await raw_json_body(request)
    if not isinstance(data, dict) or set(data) != {"items"} or not isinstance(data["items"], list):
        raise RequestValidationError(
            [
                {
                    "loc": ("body",),
                    "msg": 'the body must be {"items": [<create request>, ...]}',
                    "type": "batch_shape",
                }
            ]
        )
    items: list[object] = data["items"]
    batch_max = api_state(request).settings.batch_max_items
    if len(items) > batch_max:
        raise HTTPException(
            413,
            f"the batch holds {len(items)} runs; at most {batch_max} "
            "(LEASEHOLD_BATCH_MAX_ITEMS): split it",
        )
    return items


@router.post(
    "/runs/batch",
    response_model=CreateRunsResult,
    openapi_extra=body_doc(CreateRunsRequest),
    responses=problems(400, 413, 415, 422, 503),
)
async def create_runs(
    items: Annotated[list[object], Depends(_batch_items)], request: Request, state: State
) -> Response:
    """Create up to ``LEASEHOLD_BATCH_MAX_ITEMS`` runs; 200 with one outcome per item, in order.

    Each outcome is ``{"status": 201|200, "run": ...}`` (created, or an
    idempotent replay of the item's ``idempotency_key``) or ``{"status": 4xx|503,
    "problem": ...}`` (422 invalid, 409 key reused with another body, 413 input
    too large, 503 Redis refused that item). Items are created in one pipeline
    per queue, each atomic on its own; two items with the same key meet as two
    requests would, in order. ``cancel_on_disconnect`` and ``Accept:
    text/event-stream`` do not apply: follow each run with GET /runs/{id}/events.
    """
    outcomes: list[Outcome | None] = [None] * len(items)
    valid: dict[int, NewRun] = {}
    judge = BatchJudge(items, state)
    for i, item in enumerate(items):
        try:
            valid[i] = judge.judged(item, i)
        except Exception as exc:  # each is answered as its problem; a bug re-raises
            outcomes[i] = await _problem(request, exc)
    await _refuse_undeclared(valid, outcomes, request, state)
    await _gate_starts(valid, items, outcomes, request, state)
    if valid:
        news = list(valid.values())
        cost = sum(create_cost_bytes(_utf8_size(new.input_json)) for new in news)
        await state.memory.admit(cost)  # the whole batch, or nothing (503)
        await state.quota.admit_runs(len(news))  # the same, within the namespace (429)
        created = await state.store.create_many(news)
        await state.queues.keep_declared(new.queue for new in news)
        made: Counter[tuple[str, str]] = Counter()
        shapes = AnswerShapes()
        for i, new, outcome in zip(valid, news, created, strict=True):
            if isinstance(outcome, Exception):
                outcomes[i] = await _problem(request, outcome)
                continue
            outcomes[i] = _answer(outcome, shapes)
            if not outcome.replayed:  # the run's labels from its request: no Run built
                made[new.queue, new.handler] += 1
        for (queue, handler), count in made.items():  # one metric update per label pair
            RUNS_CREATED.labels(state.metric_queue(queue), handler).inc(count)
    return Response(_items_json(outcomes), media_type="application/json")


def _utf8_size(text: str) -> int:
    """``len(text.encode())``; an ASCII text (most inputs) without encoding it."""
    return len(text) if text.isascii() else len(text.encode())


def _items_json(outcomes: Sequence[Outcome | None]) -> bytes:
    return f'{{"items":[{",".join(o for o in outcomes if o is not None)}]}}'.encode()


async def _refuse_undeclared(
    valid: dict[int, NewRun], outcomes: list[Outcome | None], request: Request, state: ApiState
) -> None:
    """Refuse (422, in place) the items on undeclared queues; one SMISMEMBER for all."""
    undeclared = set(await state.queues.undeclared(sorted({new.queue for new in valid.values()})))
    if not undeclared:
        return
    declared = await state.queues.declared()
    for i in [i for i, new in valid.items() if new.queue in undeclared]:
        outcomes[i] = await _problem(request, QueueNotDeclared(valid.pop(i).queue, declared))


async def _gate_starts(
    valid: dict[int, NewRun],
    items: list[object],
    outcomes: list[Outcome | None],
    request: Request,
    state: ApiState,
) -> None:
    """Resolve each item's ``rate_limits`` (declarations are cached); refuse the undeclared."""
    for i in list(valid):
        item = items[i]
        names = item.get("rate_limits") if isinstance(item, dict) else None
        if not names:
            continue
        try:
            valid[i] = await with_start_gates(valid[i], names, state)
        except (RateLimitNotDeclared, HTTPException) as exc:
            del valid[i]
            outcomes[i] = await _problem(request, exc)


def _answer(outcome: Created, shapes: AnswerShapes) -> Outcome:
    status = 200 if outcome.replayed else 201
    return f'{{"status":{status},"run":{outcome.answer_json(shapes)}}}'


async def _problem(request: Request, exc: Exception) -> Outcome:
    """The problem the API answers ``exc`` with anywhere else, as one item's outcome.

    The app's own exception handlers build it, so an item's 422 or 409 reads
    exactly like the single create's; what has no handler re-raises (a bug is a 500).
    """
    handlers = request.app.exception_handlers
    handler = next((handlers[cls] for cls in type(exc).__mro__ if cls in handlers), None)
    if handler is None or handlers.get(Exception) is handler:
        raise exc
    response = await handler(request, exc)
    return f'{{"status":{response.status_code},"problem":{bytes(response.body).decode()}}}'
