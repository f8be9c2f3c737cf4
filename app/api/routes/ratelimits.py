"""/rate-limits: the operator's declared rate-limit keys and templates, with their buckets.

A key (``openai``) or a template (``crm:{tenant}``) is declared with a limit per
period and a burst. Handlers take tokens with ``ctx.rate_limit(key)``; runs may name
keys in ``rate_limits`` on create to gate their start. At most
``LEASEHOLD_MAX_RATE_LIMITS`` are declared at once.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.bodies import body_doc, json_body
from app.api.routes.runs import State, problems
from app.errors import RateLimitNotDeclared
from app.models import QUEUE_NAME_PATTERN
from app.models.api import RateLimitPage
from app.models.read import RateLimitInfo, RateLimitSpec
from app.store.ratelimits.store import valid_name

router = APIRouter(tags=["rate limits"])

KeyName = Annotated[
    str,
    Path(
        max_length=300,
        description="a key (`openai`, `crm:acme`) or a template (`crm:{tenant}`): segments "
        "of letters, digits, `_`, `.`, `-` joined by `:`, at most 4",
    ),
]


def _checked(name: str) -> str:
    if not valid_name(name):
        raise HTTPException(
            422,
            f"{name[:80]!r} is not a rate-limit key: 1 to 4 segments of letters, digits, "
            "'_', '.', '-' (at most 64 each) joined by ':', a template's segment as {name} "
            "after a fixed first one (crm:{tenant}, not {tenant})",
        )
    return name


@router.get("/rate-limits", response_model=RateLimitPage)
async def list_rate_limits(state: State) -> RateLimitPage:
    """Every declared key and template, with each key's handler bucket right now.

    A bucket's state is read by the Redis clock: tokens an immediate take would
    find, and when the next one passes. Templates have a bucket per instance: ask
    ``GET /rate-limits/{instance}``.
    """
    return RateLimitPage(
        items=await state.rate_limits.infos(), max_rate_limits=state.settings.max_rate_limits
    )


@router.get("/rate-limits/{key}", response_model=RateLimitInfo, responses=problems(404, 422))
async def get_rate_limit(
    key: KeyName,
    state: State,
    queue: Annotated[
        str | None,
        Query(pattern=QUEUE_NAME_PATTERN, description="also show this queue's start bucket"),
    ] = None,
) -> RateLimitInfo:
    """One declared key or template, or an instance of a template, with its bucket's state.

    ``?queue=`` adds that queue's start bucket (what gates runs naming the key in
    ``rate_limits``); an undeclared queue → 422.
    """
    if queue is not None:
        await state.queues.require(queue)
    return await state.rate_limits.info(_checked(key), queue)


@router.put(
    "/rate-limits/{key}",
    response_model=RateLimitInfo,
    status_code=201,
    openapi_extra=body_doc(RateLimitSpec),
    responses={
        200: {"model": RateLimitInfo, "description": "declared already: its spec is replaced"},
        **problems(400, 409, 413, 415, 422),
    },
)
async def declare_rate_limit(
    key: KeyName,
    spec: Annotated[RateLimitSpec, Depends(json_body(RateLimitSpec))],
    state: State,
    response: Response,
) -> RateLimitInfo:
    """Declare a key or template (201), or change its spec (200). An operator's action.

    Past ``LEASEHOLD_MAX_RATE_LIMITS`` declared → 409 and nothing changes. A changed
    spec reaches every worker within a second; a run already queued keeps the start
    gate it was created with.
    """
    created = await state.rate_limits.declare(_checked(key), spec)
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/rate-limits/{key}"
    return await state.rate_limits.info(key)


@router.delete("/rate-limits/{key}", status_code=204, responses=problems(404, 422))
async def undeclare_rate_limit(key: KeyName, state: State) -> Response:
    """Forget a declaration (204); one nobody declared → 404.

    Runs and handlers naming it afterwards are refused (422 on create; the handler's
    ``ctx.rate_limit`` raises ``RateLimitNotDeclared``). The name is not judged by
    today's rule: one declared under an older rule (``{tenant}`` alone) can still go.
    """
    if not await state.rate_limits.undeclare(key):
        raise RateLimitNotDeclared(key)
    return Response(status_code=204)
