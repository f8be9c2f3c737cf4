"""Browser stream tokens: a run's events for whoever holds a short-lived signed token.

``EventSource`` cannot send an ``Authorization`` header, so a page that must not hold
an API key asks its backend (which has one) for ``POST /runs/{id}/stream-token`` and
opens ``/runs/{id}/events?access_token=<token>``. The token is a JWT signed by the
signing room (:mod:`app.store.signing.store`), audience ``leasehold-stream``,
subject the run id, ``ns`` its namespace, ``tree: true`` when it may also read the run's tree
(``?include=children``), expiring after LEASEHOLD_STREAM_TOKEN_TTL_S.

:class:`~app.api.auth.BearerAuth` accepts it on that one route only, matched on the
path before routing: on any other path ``?access_token=`` is ignored (and the request
needs the key). The token rides in the URL, so it can land in access logs: it is
short-lived and reads one run's events, nothing else.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import parse_qs

from starlette.types import Scope

from app.namespaces import DEFAULT_NAMESPACE
from app.store.signing.store import SigningKeys
from app.tokens.verify import STREAM_AUDIENCE, TokenRefused, decode, key_id

# the SSE route a stream token opens (app/api/routes/events.py): one run, or its tree
STREAM_PATH = re.compile(r"^/runs/(?P<run_id>[^/]+)/events$")
QUERY_PARAM = "access_token"


def access_token(scope: Scope) -> str | None:
    """The ``?access_token=`` of a GET on the SSE route, or None (any other request)."""
    if scope.get("method") != "GET" or not STREAM_PATH.match(scope["path"]):
        return None
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(QUERY_PARAM)
    return values[-1] if values else None


async def check_stream_token(token: str, scope: Scope, signing: SigningKeys) -> str:
    """The namespace to read in, if ``token`` reads this run (or, with ``tree``, its tree).

    Raises :class:`~app.tokens.verify.TokenRefused`: not valid (tampered, expired, another
    audience, unknown key), another run, or ``include=children`` without ``tree``.
    """
    keys = await signing.public_keys()
    if not any(entry.get("kid") == key_id(token) for entry in keys["keys"]):
        keys = await signing.public_keys(fresh=True)
    claims = decode(token, keys, audience=STREAM_AUDIENCE)
    match = STREAM_PATH.match(scope["path"])
    assert match is not None  # access_token() matched it
    if claims.get("sub") != match["run_id"]:
        raise TokenRefused("the stream token is for another run")
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if "children" in ",".join(query.get("include", [])) and claims.get("tree") is not True:
        raise TokenRefused("the stream token does not read the run's tree")
    # a token from before namespaces: the default one
    return str(claims.get("ns", DEFAULT_NAMESPACE))


async def issue_stream_token(
    signing: SigningKeys, *, run_id: str, namespace: str, tree: bool, ttl_s: float
) -> tuple[str, datetime]:
    """A stream token for ``run_id`` of ``namespace`` and when it expires (Redis clock)."""
    now_ms = await signing.now_ms()
    exp_s = (now_ms + round(ttl_s * 1000)) // 1000
    claims: dict[str, object] = {
        "sub": run_id,
        "ns": namespace,
        "aud": STREAM_AUDIENCE,
        "iat": now_ms // 1000,
        "exp": exp_s,
    }
    if tree:
        claims["tree"] = True
    return await signing.sign(claims), datetime.fromtimestamp(exp_s, UTC)
