"""Signed tokens: the public keys (JWKS) and browser stream tokens.

``GET /.well-known/jwks.json`` is open (public keys only): token verifiers — the
standalone :mod:`app.tokens.verify`, ``leasehold gate``, any JOSE library — fetch it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from app.api.bodies import body_doc, optional_json_body
from app.api.routes.runs import RunId, State, problems
from app.api.stream_tokens import issue_stream_token
from app.models.api import StreamToken, StreamTokenRequest
from app.telemetry.metrics import STREAM_TOKENS_ISSUED

router = APIRouter()


@router.get("/.well-known/jwks.json", tags=["tokens"], responses=problems(503))
async def jwks(state: State) -> dict[str, Any]:
    """The public keys stream and lease tokens are signed with (RFC 7517 JWK Set).

    A replaced key stays here until every token it can have signed has expired.
    """
    return await state.signing.public_keys()


@router.post(
    "/runs/{run_id}/stream-token",
    response_model=StreamToken,
    responses=problems(400, 404, 415, 422),
    tags=["tokens"],
    openapi_extra=body_doc(StreamTokenRequest, required=False),
)
async def stream_token(
    run_id: RunId,
    state: State,
    body: Annotated[StreamTokenRequest | None, Depends(optional_json_body(StreamTokenRequest))],
) -> StreamToken:
    """A short-lived token a browser opens the run's event stream with.

    ``new EventSource('/runs/<id>/events?access_token=<token>')``: accepted on that
    route only, for this run only (with ``tree``: its tree too, ``?include=children``),
    for LEASEHOLD_STREAM_TOKEN_TTL_S.
    """
    await state.store.get(run_id)  # 404 for no such run: a token for nothing is refused
    token, expires_at = await issue_stream_token(
        state.signing,
        run_id=run_id,
        namespace=state.settings.namespace,
        tree=body.tree if body is not None else False,
        ttl_s=state.settings.stream_token_ttl_s,
    )
    STREAM_TOKENS_ISSUED.inc()
    return StreamToken(token=token, expires_at=expires_at)
