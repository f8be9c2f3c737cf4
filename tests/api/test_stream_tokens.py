"""Browser stream tokens: ``?access_token=`` opens one run's events, and nothing else.

Every hostile token is a 401 problem+json: another run's, expired, tampered, signed
with ``alg: none`` or HMAC over the public key, another audience, an unknown key, a
tree stream without ``tree``, and any token on a route other than the SSE one.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from app.settings import Settings
from app.store.signing.store import SigningKeys
from app.tokens.verify import STREAM_AUDIENCE

KEY = "k-primary-0123456789abcdef"
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def keyed_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"api_keys": [KEY]})


@pytest.fixture
def api(keyed_api: httpx.AsyncClient) -> httpx.AsyncClient:
    return keyed_api


def signing(app: FastAPI) -> SigningKeys:
    keys: SigningKeys = app.state.leasehold.signing
    return keys


async def finished_run(api: httpx.AsyncClient) -> str:
    """A run that has ended (cancelled): its event stream closes after the replay."""
    run_id: str = (await api.post("/runs", json=ECHO, headers=AUTH)).json()["id"]
    await api.post(f"/runs/{run_id}/cancel", headers=AUTH)
    return run_id


async def stream_token(api: httpx.AsyncClient, run_id: str, **body: Any) -> str:
    response = await api.post(f"/runs/{run_id}/stream-token", json=body or None, headers=AUTH)
    assert response.status_code == 200, response.text
    token: str = response.json()["token"]
    return token


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 401


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


async def test_jwks_is_open_and_publishes_public_keys_only(api: httpx.AsyncClient) -> None:
    assert (await api.get("/.well-known/jwks.json")).json() == {"keys": []}, "no key made yet"
    await stream_token(api, await finished_run(api))
    response = await api.get("/.well-known/jwks.json")
    assert response.status_code == 200
    (key,) = response.json()["keys"]
    assert key["kty"] == "OKP" and key["crv"] == "Ed25519" and key["alg"] == "EdDSA"
    assert "d" not in key, "never the private half"


async def test_a_stream_token_needs_the_api_key(api: httpx.AsyncClient) -> None:
    run_id = await finished_run(api)
    assert_refused(await api.post(f"/runs/{run_id}/stream-token"))


async def test_a_stream_token_for_no_such_run_is_404(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV/stream-token", headers=AUTH)
    assert response.status_code == 404


async def test_a_stream_token_opens_its_runs_events_without_a_key(api: httpx.AsyncClient) -> None:
    run_id = await finished_run(api)
    response = await api.post(f"/runs/{run_id}/stream-token", headers=AUTH)
    assert set(response.json()) == {"token", "expires_at"}
    token = response.json()["token"]
    events = await api.get(f"/runs/{run_id}/events", params={"access_token": token})
    assert events.status_code == 200, events.text
    assert "event: cancelled" in events.text


async def test_a_tree_token_opens_the_tree_stream(api: httpx.AsyncClient) -> None:
    run_id = await finished_run(api)
    token = await stream_token(api, run_id, tree=True)
    query = {"access_token": token, "include": "children"}
    response = await api.get(f"/runs/{run_id}/events", params=query)
    assert response.status_code == 200, response.text


async def test_a_run_token_does_not_open_the_tree_stream(api: httpx.AsyncClient) -> None:
    run_id = await finished_run(api)
    token = await stream_token(api, run_id)
    query = {"access_token": token, "include": "children"}
    assert_refused(await api.get(f"/runs/{run_id}/events", params=query))


async def test_another_runs_token_is_refused(api: httpx.AsyncClient) -> None:
    mine, other = await finished_run(api), await finished_run(api)
    token = await stream_token(api, other)
    assert_refused(await api.get(f"/runs/{mine}/events", params={"access_token": token}))


@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/runs/{run_id}"),
        ("GET", "/runs"),
        ("POST", "/runs/{run_id}/cancel"),
        ("POST", "/runs/{run_id}/stream-token"),
        ("GET", "/leases/{run_id}"),
        ("GET", "/runs/{run_id}/children"),
        ("GET", "/openapi.json"),
    ],
)
async def test_a_stream_token_opens_no_other_route(
    api: httpx.AsyncClient, method: str, template: str
) -> None:
    run_id = await finished_run(api)
    token = await stream_token(api, run_id, tree=True)
    path = template.replace("{run_id}", run_id)
    assert_refused(await api.request(method, path, params={"access_token": token}))
    # not as a bearer header either: it is not an API key
    bearer = {"Authorization": f"Bearer {token}"}
    assert_refused(await api.request(method, path, headers=bearer))


async def test_a_tampered_token_is_refused(api: httpx.AsyncClient) -> None:
    mine, other = await finished_run(api), await finished_run(api)
    header, payload, signature = (await stream_token(api, other)).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged = f"{header}.{b64({**claims, 'sub': mine})}.{signature}"
    assert_refused(await api.get(f"/runs/{mine}/events", params={"access_token": forged}))
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    token = f"{header}.{payload}.{flipped}"
    assert_refused(await api.get(f"/runs/{other}/events", params={"access_token": token}))


async def test_an_unsigned_token_is_refused(api: httpx.AsyncClient, keyed_app: FastAPI) -> None:
    run_id = await finished_run(api)
    await stream_token(api, run_id)  # the first token makes the first key
    kid = (await signing(keyed_app).public_keys())["keys"][0]["kid"]
    claims = {"iss": "leasehold", "sub": run_id, "aud": STREAM_AUDIENCE, "iat": 1, "exp": 2**40}
    unsigned = f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': kid})}.{b64(claims)}."
    assert_refused(await api.get(f"/runs/{run_id}/events", params={"access_token": unsigned}))


async def test_an_hmac_token_keyed_with_the_public_key_is_refused(
    api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    run_id = await finished_run(api)
    await stream_token(api, run_id)
    jwk = (await signing(keyed_app).public_keys())["keys"][0]
    claims = {"iss": "leasehold", "sub": run_id, "aud": STREAM_AUDIENCE, "iat": 1, "exp": 2**40}
    forged = jwt.encode(claims, jwk["x"].encode() * 2, "HS256", headers={"kid": jwk["kid"]})
    assert_refused(await api.get(f"/runs/{run_id}/events", params={"access_token": forged}))


async def test_an_expired_token_is_refused(api: httpx.AsyncClient, keyed_app: FastAPI) -> None:
    run_id = await finished_run(api)
    now_s = await signing(keyed_app).now_ms() // 1000
    claims = {"sub": run_id, "aud": STREAM_AUDIENCE, "iat": now_s - 600, "exp": now_s - 300}
    expired = await signing(keyed_app).sign(claims)
    response = await api.get(f"/runs/{run_id}/events", params={"access_token": expired})
    assert_refused(response)
    assert "expired" in response.json()["detail"]


async def test_a_token_for_another_audience_is_refused(
    api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    run_id = await finished_run(api)
    now_s = await signing(keyed_app).now_ms() // 1000
    claims = {"sub": run_id, "aud": "leasehold-gate", "iat": now_s, "exp": now_s + 60}
    lease_like = await signing(keyed_app).sign(claims)
    assert_refused(await api.get(f"/runs/{run_id}/events", params={"access_token": lease_like}))


async def test_a_token_signed_by_an_unknown_key_is_refused(api: httpx.AsyncClient) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    run_id = await finished_run(api)
    claims = {"iss": "leasehold", "sub": run_id, "aud": STREAM_AUDIENCE, "iat": 1, "exp": 2**40}
    stranger = jwt.encode(claims, Ed25519PrivateKey.generate(), "EdDSA", headers={"kid": "x"})
    assert_refused(await api.get(f"/runs/{run_id}/events", params={"access_token": stranger}))


async def test_a_valid_key_header_wins_over_a_bad_token(api: httpx.AsyncClient) -> None:
    run_id = await finished_run(api)
    query = {"access_token": "not-a-token"}
    response = await api.get(f"/runs/{run_id}/events", params=query, headers=AUTH)
    assert response.status_code == 200


async def test_the_client_fetches_a_stream_token_and_reads_the_lease(
    api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    from app.client import AsyncClient

    run_id = await finished_run(api)
    transport = httpx.ASGITransport(app=keyed_app)
    async with AsyncClient("http://localhost", api_key=KEY, transport=transport) as client:
        issued = await client.stream_token(run_id, tree=True)
        lease = await client.lease(run_id)
    assert lease.run_id == run_id and lease.held is False and lease.status == "cancelled"
    query = {"access_token": issued.token, "include": "children"}
    assert (await api.get(f"/runs/{run_id}/events", params=query)).status_code == 200


async def test_get_lease_answers_404_for_no_such_run(api: httpx.AsyncClient) -> None:
    response = await api.get("/leases/default.01ARZ3NDEKTSV4RRFFQ69G5FAV", headers=AUTH)
    assert response.status_code == 404
