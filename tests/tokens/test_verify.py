"""The standalone verifier: every hostile lease token refused, a stale fence refused online."""

from __future__ import annotations

import ast
import base64
import json
import sys
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm

from app.tokens import verify
from app.tokens.verify import LeaseVerifier, TokenRefused

AUDIENCE = "tools"
KEY = Ed25519PrivateKey.generate()
JWKS = {
    "keys": [{**json.loads(OKPAlgorithm.to_jwk(KEY.public_key())), "kid": "k1", "alg": "EdDSA"}]
}
NOW = 1_900_000_000


def claims(**changes: Any) -> dict[str, Any]:
    base = {
        "iss": "leasehold",
        "sub": "default.01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "aud": AUDIENCE,
        "iat": NOW,
        "exp": NOW + 30,
        "queue": "default",
        "owner": "w-1",
        "fence": 3,
    }
    return {**base, **changes}


def sign(payload: dict[str, Any], *, kid: str = "k1") -> str:
    return jwt.encode(payload, KEY, "EdDSA", headers={"kid": kid})


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jwt.api_jwt.datetime", _Frozen)


class _Frozen:
    """PyJWT reads ``datetime.now(tz=timezone.utc)``: the tests' tokens live at NOW."""

    @staticmethod
    def now(tz: Any = None) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(NOW + 1, tz)


def offline() -> LeaseVerifier:
    return LeaseVerifier(audience=AUDIENCE, jwks=JWKS, online=False)


def test_a_valid_lease_token_gives_its_claims() -> None:
    got = offline().verify(sign(claims()))
    assert (got.run_id, got.queue, got.owner_id, got.fence) == (
        claims()["sub"],
        "default",
        "w-1",
        3,
    )


HOSTILE = {
    "expired": lambda: sign(claims(exp=NOW - 1)),
    "wrong-audience": lambda: sign(claims(aud="leasehold-stream")),
    "other-issuer": lambda: sign(claims(iss="evil")),
    "unknown-kid": lambda: sign(claims(), kid="k2"),
    "no-kid": lambda: jwt.encode(claims(), KEY, "EdDSA"),
    "alg-none": lambda: f"{b64({'alg': 'none', 'kid': 'k1'})}.{b64(claims())}.",
    "hmac-over-public-key": lambda: jwt.encode(
        claims(), JWKS["keys"][0]["x"].encode() * 2, "HS256", headers={"kid": "k1"}
    ),
    "other-signer": lambda: jwt.encode(
        claims(), Ed25519PrivateKey.generate(), "EdDSA", headers={"kid": "k1"}
    ),
    "tampered-fence": lambda: _retarget(sign(claims()), fence=4),
    "tampered-run": lambda: _retarget(sign(claims()), sub="default.01BX5ZZKBKACTAV9WEVGEMMVRZ"),
    "no-fence": lambda: sign({k: v for k, v in claims().items() if k != "fence"}),
    "fence-not-int": lambda: sign(claims(fence="3")),
    "not-a-jwt": lambda: "garbage",
}


def _retarget(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return f"{header}.{b64({**data, **changes})}.{signature}"


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_every_hostile_token_is_refused_401(make: Any) -> None:
    with pytest.raises(TokenRefused) as refused:
        offline().verify(make())
    assert refused.value.status == 401


class FakeApi(LeaseVerifier):
    """The online check against a lease answer the test sets (no HTTP)."""

    lease: dict[str, Any]
    asked = 0

    def _get(self, path: str, *, auth: bool, namespace: str | None = None) -> dict[str, Any]:
        assert path == f"/leases/{claims()['sub']}" and auth
        # a token without ``ns`` is the default namespace's: the check asks there
        assert namespace == claims().get("ns", "default")
        self.asked += 1
        return self.lease


def online(lease: dict[str, Any]) -> FakeApi:
    verifier = FakeApi(audience=AUDIENCE, jwks=JWKS, api_url="http://api", online=True)
    verifier.lease = lease
    return verifier


def test_online_a_current_fence_passes_and_is_kept_a_third_of_the_lifetime() -> None:
    verifier = online({"owner_id": "w-1", "fence": 3, "held": True})
    for _ in range(3):
        verifier.verify(sign(claims()))
    assert verifier.asked == 1


def test_online_a_taken_over_run_is_refused_409_before_the_token_expires() -> None:
    verifier = online({"owner_id": "w-2", "fence": 4, "held": True})
    with pytest.raises(TokenRefused) as refused:
        verifier.verify(sign(claims()))
    assert refused.value.status == 409 and "stale" in refused.value.reason


def test_online_a_kept_answer_past_the_tokens_fence_refuses_without_asking_again() -> None:
    verifier = online({"owner_id": "w-2", "fence": 4, "held": True})
    for _ in range(3):
        with pytest.raises(TokenRefused):
            verifier.verify(sign(claims()))
    assert verifier.asked == 1


def test_online_a_lease_no_longer_held_is_refused_409() -> None:
    verifier = online({"owner_id": "w-1", "fence": 3, "held": False})
    with pytest.raises(TokenRefused) as refused:
        verifier.verify(sign(claims()))
    assert refused.value.status == 409


def test_online_needs_an_api_url() -> None:
    with pytest.raises(ValueError, match="api_url"):
        LeaseVerifier(audience=AUDIENCE, jwks=JWKS, online=True)


def test_the_verifier_imports_nothing_of_leasehold() -> None:
    tree = ast.parse(Path(verify.__file__).read_text())
    roots = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.module is None)
    }
    assert roots - set(sys.stdlib_module_names) == {"jwt"}
