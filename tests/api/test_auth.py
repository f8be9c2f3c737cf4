"""Bearer keys: with LEASEHOLD_API_KEYS set, every route but /healthz needs one.

Every route of the app is enumerated from ``app.routes``, so a route added later
(by any module) is covered without touching this file.
"""

from __future__ import annotations

import hashlib
import hmac

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from app.api.auth import OPEN_PATHS
from app.settings import Settings
from tests.support.routes import served_operations

KEY = "k-primary-0123456789abcdef"
OTHER_KEY = "k-rotated-0123456789abcdef"
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
BODIES = {"/runs": ECHO}
# what the right key gets on the routes the API has today; a route added later
# must at least not answer 401
EXPECTED_WITH_KEY = {
    ("GET", "/healthz"): 200,
    ("GET", "/readyz"): 200,
    ("GET", "/handlers"): 200,
    ("GET", "/workers"): 200,
    ("GET", "/runs"): 200,
    ("POST", "/runs"): 201,
    ("GET", "/runs/{run_id}"): 200,
    ("POST", "/runs/{run_id}/cancel"): 202,
    ("GET", "/runs/{run_id}/events"): 200,
    ("GET", "/openapi.json"): 200,
    ("GET", "/docs"): 200,
    ("GET", "/config"): 200,
    ("GET", "/"): 200,
    ("GET", "/console"): 200,
}
# endless by design: the in-process transport would buffer them forever (their auth
# is covered by tests/api/test_console.py and the browser tests)
ENDLESS = {("GET", "/activity")}


@pytest.fixture
def keyed_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"api_keys": [KEY, OTHER_KEY]})


def every_operation(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves; the known ones at least."""
    operations = served_operations(app)
    assert set(EXPECTED_WITH_KEY) - {("GET", "/runs/{run_id}/events")} <= set(operations)
    return operations


def sha256(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def keys_of(client: aioredis.Redis, prefix: str) -> list[str]:
    return sorted(await client.keys(f"{prefix}:*"))


async def a_finished_run(keyed_api: httpx.AsyncClient) -> str:
    """A run that has ended (cancelled), so its event stream closes after replay."""
    run_id: str = (await keyed_api.post("/runs", json=ECHO, headers=bearer(KEY))).json()["id"]
    await keyed_api.post(f"/runs/{run_id}/cancel", headers=bearer(KEY))
    return run_id


async def call(
    keyed_api: httpx.AsyncClient, method: str, template: str, run_id: str, headers: dict[str, str]
) -> httpx.Response:
    path = template.replace("{run_id}", run_id)
    return await keyed_api.request(method, path, json=BODIES.get(template), headers=headers)


async def test_every_route_but_healthz_refuses_a_request_without_a_key(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI, redis_client: aioredis.Redis, prefix: str
) -> None:
    run_id = "default.01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for method, template in every_operation(keyed_app):
        response = await call(keyed_api, method, template, run_id, headers={})
        if template in OPEN_PATHS:
            assert response.status_code == 200
            continue
        assert response.status_code == 401, (method, template, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"] == 'Bearer realm="leasehold"'
        assert response.json()["status"] == 401
    assert await keys_of(redis_client, prefix) == [], "nothing is written without a key"


WRONG_CREDENTIALS = [
    pytest.param(bearer("k-wrong-0123456789abcdefg"), id="unknown-key"),
    pytest.param(bearer(KEY[:-1]), id="prefix-of-a-key"),
    pytest.param(bearer(KEY + "x"), id="key-plus-a-char"),
    pytest.param({"Authorization": f"Basic {KEY}"}, id="other-scheme"),
    pytest.param({"Authorization": KEY}, id="no-scheme"),
    pytest.param({"Authorization": "Bearer "}, id="empty-token"),
]


@pytest.mark.parametrize("headers", WRONG_CREDENTIALS)
async def test_every_route_but_healthz_refuses_a_wrong_key(
    keyed_api: httpx.AsyncClient,
    keyed_app: FastAPI,
    redis_client: aioredis.Redis,
    prefix: str,
    headers: dict[str, str],
) -> None:
    run_id = "default.01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for method, template in every_operation(keyed_app):
        response = await call(keyed_api, method, template, run_id, headers=headers)
        expected = 200 if template in OPEN_PATHS else 401
        assert response.status_code == expected, (method, template, response.text)
        if expected == 401:
            assert response.headers["www-authenticate"].startswith("Bearer realm=")
    assert await keys_of(redis_client, prefix) == []


async def test_a_wrong_key_is_told_invalid_token(keyed_api: httpx.AsyncClient) -> None:
    response = await keyed_api.get("/runs", headers=bearer("k-wrong-0123456789abcdefg"))
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        'Bearer realm="leasehold", error="invalid_token"'
    )
    assert "not valid" in response.json()["detail"]


@pytest.mark.parametrize("key", [KEY, OTHER_KEY], ids=["primary", "rotated"])
async def test_every_route_answers_normally_with_a_right_key(
    keyed_api: httpx.AsyncClient, keyed_app: FastAPI, key: str
) -> None:
    run_id = await a_finished_run(keyed_api)
    # deletes last: the routes after a DELETE would otherwise look for a run it removed
    operations = sorted(every_operation(keyed_app), key=lambda op: op[0] == "DELETE")
    for method, template in operations:
        if (method, template) in ENDLESS:
            continue
        response = await call(keyed_api, method, template, run_id, headers=bearer(key))
        expected = EXPECTED_WITH_KEY.get((method, template))
        if expected is None:
            assert response.status_code != 401, (method, template)
        else:
            assert response.status_code == expected, (method, template, response.text)


async def test_a_client_without_a_key_is_refused_before_its_body_is_read(
    keyed_api: httpx.AsyncClient, keyed_settings: Settings
) -> None:
    oversized = b"x" * (keyed_settings.max_input_bytes * 2)
    response = await keyed_api.post("/runs", content=oversized)
    assert response.status_code == 401, "not 413: a stranger learns nothing about limits"


async def test_scheme_name_is_case_insensitive(keyed_api: httpx.AsyncClient) -> None:
    response = await keyed_api.get("/handlers", headers={"Authorization": f"bearer {KEY}"})
    assert response.status_code == 200


async def test_every_configured_key_is_compared_in_constant_time(
    keyed_api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for presented in (KEY, OTHER_KEY, "k-wrong-0123456789abcdefg"):
        compared.clear()
        await keyed_api.get("/handlers", headers=bearer(presented))
        # every key, even after a match: timing says nothing about which key matched;
        # digests of one length: nor about a key's length
        assert [stored for _, stored in compared] == [sha256(KEY), sha256(OTHER_KEY)]
        assert {given for given, _ in compared} == {sha256(presented)}
        assert {len(value) for pair in compared for value in pair} == {32}


async def test_without_keys_configured_no_key_is_needed(api: httpx.AsyncClient) -> None:
    # `api` (tests/api/conftest.py) is the app with default settings: no keys
    assert (await api.get("/handlers")).status_code == 200


async def test_openapi_declares_the_bearer_scheme_on_every_guarded_operation(
    keyed_api: httpx.AsyncClient,
) -> None:
    document = (await keyed_api.get("/openapi.json", headers=bearer(KEY))).json()
    scheme = document["components"]["securitySchemes"]["bearerKey"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in OPEN_PATHS:  # /healthz, /.well-known/jwks.json
                assert "401" not in operation["responses"]
                assert "security" not in operation
            else:
                assert "401" in operation["responses"], (method, path)
                assert operation["security"] == [{"bearerKey": []}]


async def test_docs_page_and_swagger_assets_load_without_a_key_but_the_spec_needs_one(
    keyed_api: httpx.AsyncClient,
) -> None:
    page = await keyed_api.get("/docs")
    assert page.status_code == 200
    # served from here, never a CDN: the page works offline
    assert "http://" not in page.text and "https://" not in page.text
    assert "/docs/assets/swagger-ui-bundle.js" in page.text
    bundle = await keyed_api.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and len(bundle.content) > 100_000
    assert (await keyed_api.get("/openapi.json")).status_code == 401
    assert (await keyed_api.get("/docs/assets/../../openapi.json")).status_code in (401, 404)
