"""Stored API keys (``/keys``) and the audit stream (``/audit``); every route here is admin.

Secrets appear in exactly two answers, create and rotate, once; nothing logs them.
Keys only matter while authentication is on (``LEASEHOLD_API_KEYS`` set): with it off,
``POST /keys`` is a 409 rather than a key that would protect nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from app.api.bodies import body_doc, json_body
from app.api.problems import problem
from app.api.routes.runs import State, problems
from app.models.keys import (
    KEY_ID_PATTERN,
    AuditPage,
    KeyCreate,
    KeyPage,
    KeyRotate,
    KeySecret,
    Role,
)
from app.store.apikeys.store import KeyLimitReached

router = APIRouter(tags=["keys"])
KeyId = Annotated[str, Path(pattern=KEY_ID_PATTERN, description="the key's id (`GET /keys`)")]
STREAM_ID_PATTERN = r"^[0-9]{1,19}-[0-9]{1,19}$"


@router.post(
    "/keys",
    status_code=201,
    response_model=KeySecret,
    openapi_extra=body_doc(KeyCreate),
    responses=problems(400, 409, 413, 415, 422, 503),
)
async def create_key(
    body: Annotated[KeyCreate, Depends(json_body(KeyCreate))], state: State
) -> KeySecret | Response:
    """A new key with one role, bound to one namespace or reaching all; its secret is in
    this answer and nowhere else, ever.

    A bound key reads and writes its namespace only (an admin key is never bound: 422);
    the namespace must exist (422 otherwise).

    Past ``LEASEHOLD_MAX_API_KEYS`` live keys → 409; with authentication off → 409.
    """
    if not state.settings.api_keys:
        return problem(
            409,
            "Authentication is off",
            "set LEASEHOLD_API_KEYS (the bootstrap admin keys) before creating scoped keys",
            kind="auth-off",
        )
    if body.namespace is not None:
        if body.role is Role.ADMIN:
            return problem(
                422,
                "An admin key reaches every namespace",
                "admin keys manage the namespaces, keys and workers themselves: make this "
                "key without a namespace, or give it the operate role",
                kind="admin-key-bound",
            )
        if await state.directory.find(body.namespace) is None:
            return problem(
                422,
                "No such namespace",
                f"namespace {body.namespace!r} does not exist: PUT /namespaces/{{name}} first",
                kind="namespace-not-found",
            )
    try:
        return await state.keyring.store.create(
            name=body.name,
            role=body.role,
            expires_in_s=body.expires_in_s,
            namespace=body.namespace,
        )
    except KeyLimitReached:
        return problem(
            409,
            "Too many keys",
            f"{state.settings.max_api_keys} live keys exist (LEASEHOLD_MAX_API_KEYS); revoke one",
            kind="key-limit-reached",
        )


@router.get("/keys", response_model=KeyPage, responses=problems(503))
async def list_keys(state: State) -> KeyPage:
    """Every live stored key, oldest first; never a secret (the bootstrap keys are not listed)."""
    return KeyPage(items=await state.keyring.store.list())


@router.post(
    "/keys/{key_id}/rotate",
    response_model=KeySecret,
    openapi_extra=body_doc(KeyRotate),
    responses=problems(400, 404, 413, 415, 422, 503),
)
async def rotate_key(
    key_id: KeyId,
    body: Annotated[KeyRotate, Depends(json_body(KeyRotate))],
    state: State,
) -> KeySecret:
    """A new secret for the key, same id, name and role; the old secret keeps working
    ``grace_s`` (default ``LEASEHOLD_KEY_ROTATION_GRACE_S``), then stops; a secret from
    before an earlier rotation stops now."""
    grace_s = state.settings.key_rotation_grace_s if body.grace_s is None else body.grace_s
    rotated = await state.keyring.store.rotate(key_id, grace_s=grace_s)
    if rotated is None:
        raise HTTPException(404, f"no key {key_id!r} (see GET /keys)")
    state.keyring.forget()
    return rotated


@router.delete("/keys/{key_id}", status_code=204, responses=problems(404, 422, 503))
async def revoke_key(key_id: KeyId, state: State) -> Response:
    """Revoke the key: both its secrets stop at once in this process, and within
    ``LEASEHOLD_KEY_CACHE_TTL_S`` in every other API process."""
    if not await state.keyring.store.revoke(key_id):
        raise HTTPException(404, f"no key {key_id!r} (see GET /keys)")
    state.keyring.forget()
    return Response(status_code=204)


@router.get("/audit", response_model=AuditPage, responses=problems(422, 503))
async def read_audit(
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[str | None, Query(pattern=STREAM_ID_PATTERN)] = None,
) -> AuditPage:
    """Operate and admin calls, newest first: who (key id and name), role, method, path,
    status, when (Redis clock), from which address. ``before`` = a page's ``next_cursor``."""
    return await state.audit.page(limit=limit, before=before)
