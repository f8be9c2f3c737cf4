"""Namespaces (``/namespaces``): an admin declares tenants and their quotas; a tenant
reads its own (``GET /namespaces/{name}``), usage included.

A namespace is a key space (:mod:`app.namespaces`), so declaring one writes one record
and deleting one is refused while it still holds queues or schedules (its keys would
outlive it, unreachable). ``default`` always exists; deleting it forgets its quotas.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response

from app.api.bodies import body_doc, json_body
from app.api.problems import problem
from app.api.routes.runs import State, problems
from app.api.state import ApiState
from app.models.namespaces import Namespace, NamespacePage, NamespaceSpec, Usage
from app.namespaces import NAMESPACE_PATTERN
from app.store.codec import ms_to_datetime
from app.store.namespaces.store import (
    NamespaceLimitReached,
    NamespaceNotEmpty,
    NamespaceRecord,
)

router = APIRouter(tags=["namespaces"])
NamespaceName = Annotated[str, Path(pattern=NAMESPACE_PATTERN, description="the namespace")]


def _not_found(name: str) -> Response:
    return problem(
        404,
        "Namespace not found",
        f"no namespace {name!r} is reachable with these credentials",
        kind="namespace-not-found",
    )


def _shown(record: NamespaceRecord, usage: Usage | None = None) -> Namespace:
    return Namespace(
        name=record.name,
        quotas=record.quotas,
        created_at=ms_to_datetime(record.created_ms) if record.created_ms else None,
        usage=usage,
    )


@router.get("/namespaces", response_model=NamespacePage, responses=problems(503))
async def list_namespaces(state: State) -> NamespacePage:
    """Every namespace and its quotas, ``default`` first (usage: ``GET /namespaces/{name}``)."""
    records = await state.directory.store.list()
    return NamespacePage(items=[_shown(record) for record in records])


@router.get("/namespaces/{name}", response_model=Namespace, responses=problems(404, 422, 503))
async def get_namespace(
    name: NamespaceName, request: Request, state: State
) -> Namespace | Response:
    """One namespace: its quotas and what it holds now (live runs, an estimate of its
    stored bytes, queues, schedules). A key bound to a namespace reads only its own."""
    bound = request.scope.get("state", {}).get("bound_namespace")
    record = await state.directory.store.get(name)
    if record is None or (bound is not None and bound != name):
        return _not_found(name)
    return _shown(record, await _usage(state.for_namespace(name)))


async def _usage(state: ApiState) -> Usage:
    held = await state.quota.held(complete=True)
    return Usage(
        live_runs=held.live_runs,
        stored_bytes=held.stored_bytes,
        queues=held.queues,
        schedules=held.schedules,
        measured_at=state.quota.measured_at,
    )


@router.put(
    "/namespaces/{name}",
    response_model=Namespace,
    openapi_extra=body_doc(NamespaceSpec),
    responses={201: {"model": Namespace}, **problems(400, 409, 413, 415, 422, 503)},
)
async def put_namespace(
    name: NamespaceName,
    body: Annotated[NamespaceSpec, Depends(json_body(NamespaceSpec))],
    response: Response,
    state: State,
) -> Namespace | Response:
    """Declare a namespace (201) or replace its quotas (200).

    Past ``LEASEHOLD_MAX_NAMESPACES`` → 409. Quotas apply from the next request of
    every API process within ``LEASEHOLD_NAMESPACE_CACHE_TTL_S``; lowering one below
    what the namespace holds refuses new writes, never removes what exists.
    """
    try:
        created = await state.directory.store.put(name, body.quotas)
    except NamespaceLimitReached:
        return problem(
            409,
            "Too many namespaces",
            f"{state.settings.max_namespaces} namespaces exist (LEASEHOLD_MAX_NAMESPACES); "
            "delete one",
            kind="namespace-limit-reached",
        )
    state.directory.forget(name)
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/namespaces/{name}"
    record = await state.directory.store.get(name)
    assert record is not None
    return _shown(record)


@router.delete("/namespaces/{name}", status_code=204, responses=problems(404, 409, 422, 503))
async def delete_namespace(name: NamespaceName, state: State) -> Response:
    """Forget a namespace that holds no queues and no schedules (else 409 saying so).

    Keys bound to it stop reaching anything (404) until it is declared again.
    """
    if await state.directory.store.get(name) is None:
        return _not_found(name)
    try:
        found = await state.directory.store.delete(name, state.for_namespace(name).queues)
    except NamespaceNotEmpty:
        return problem(
            409,
            "Namespace not empty",
            f"namespace {name!r} still has declared queues or schedules: delete them first",
            kind="namespace-not-empty",
        )
    state.directory.forget(name)
    if name != state.settings.namespace:
        state.forget_namespace(name)
    return Response(status_code=204) if found or name == "default" else _not_found(name)
