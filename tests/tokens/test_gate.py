"""The gate in-process: what it refuses, and what the upstream gets when it lets a call by."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm

from app.tokens.gate import gate_app
from app.tokens.verify import LeaseVerifier

KEY = Ed25519PrivateKey.generate()
JWKS = {
    "keys": [{**json.loads(OKPAlgorithm.to_jwk(KEY.public_key())), "kid": "k1", "alg": "EdDSA"}]
}


def token(**changes: Any) -> str:
    claims = {
        "iss": "leasehold",
        "sub": "default.01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "aud": "tools",
        "iat": 0,
        "exp": 2**40,
        "queue": "default",
        "owner": "w-1",
        "fence": 3,
        **changes,
    }
    return jwt.encode(claims, KEY, "EdDSA", headers={"kid": "k1"})


class Upstream:
    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        # a streamed answer, as a real upstream's is (the gate relays its raw bytes)
        headers = {"x-tool": "yes", "content-type": "application/json"}
        return httpx.Response(201, headers=headers, stream=httpx.ByteStream(b'{"ok": true}'))


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
async def gate(upstream: Upstream) -> AsyncIterator[httpx.AsyncClient]:
    verifier = LeaseVerifier(audience="tools", jwks=JWKS, online=False)
    app = gate_app(
        upstream="http://tool", verifier=verifier, transport=httpx.MockTransport(upstream)
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gate") as client:
            yield client


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"Authorization": "Bearer garbage"}, id="garbage"),
        pytest.param({"Authorization": f"Bearer {token(aud='other')}"}, id="wrong-audience"),
        pytest.param({"Authorization": f"Bearer {token(exp=1)}"}, id="expired"),
        pytest.param({"Leasehold-Lease": token()[:-4] + "AAAA"}, id="tampered"),
    ],
)
async def test_a_call_without_a_valid_lease_token_never_reaches_the_tool(
    gate: httpx.AsyncClient, upstream: Upstream, headers: dict[str, str]
) -> None:
    response = await gate.post("/charge", json={}, headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert upstream.seen == []


async def test_a_valid_call_is_forwarded_without_the_token_and_with_who_called(
    gate: httpx.AsyncClient, upstream: Upstream
) -> None:
    response = await gate.post(
        "/charge?x=1", json={"amount": 5}, headers={"Authorization": f"Bearer {token()}"}
    )
    assert response.status_code == 201 and response.json() == {"ok": True}
    assert response.headers["x-tool"] == "yes"
    (seen,) = upstream.seen
    assert seen.url.path == "/charge" and seen.url.query == b"x=1"
    assert json.loads(seen.content) == {"amount": 5}
    assert "authorization" not in seen.headers
    assert (seen.headers["leasehold-owner"], seen.headers["leasehold-fence"]) == ("w-1", "3")


async def test_the_lease_header_leaves_authorization_to_the_tool(
    gate: httpx.AsyncClient, upstream: Upstream
) -> None:
    headers = {"Leasehold-Lease": token(), "Authorization": "Bearer tool-secret"}
    assert (await gate.get("/x", headers=headers)).status_code == 201
    (seen,) = upstream.seen
    assert seen.headers["authorization"] == "Bearer tool-secret"
    assert "leasehold-lease" not in seen.headers
