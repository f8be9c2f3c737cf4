"""A browser page on another site may not change anything, with or without keys (CSRF).

The JSON body rule already refuses a forged create; these are the writes that
need no body (cancel, resume) and every unsafe method, refused from the request's
``Origin`` before anything is read or written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.settings import Settings
from tests.support.snapshots import snapshot

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
EVIL = {"Origin": "http://attacker.example"}


async def created(api: httpx.AsyncClient) -> str:
    response = await api.post("/runs", json=ECHO)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize(
    "origin",
    ["http://attacker.example", "null", "http://localhost.attacker.example", "http://localhost:1"],
)
async def test_a_foreign_origin_cannot_cancel_a_run(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, origin: str
) -> None:
    run_id = await created(api)
    before = await snapshot(redis_client, prefix)
    response = await api.post(f"/runs/{run_id}/cancel", headers={"Origin": origin})
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"].endswith("/cross-site-request")
    assert "LEASEHOLD_CORS_ORIGINS" in response.json()["detail"]
    assert await snapshot(redis_client, prefix) == before, "a refused request wrote something"
    assert (await api.get(f"/runs/{run_id}")).json()["status"] == "queued"


async def test_every_unsafe_method_from_a_foreign_origin_is_refused(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    run_id = await created(api)
    before = await snapshot(redis_client, prefix)
    attempts = [
        ("POST", "/runs", ECHO),
        ("POST", f"/runs/{run_id}/cancel", None),
        ("POST", f"/runs/{run_id}/resume", None),
        ("DELETE", f"/runs/{run_id}", None),
        ("PUT", "/queues/forged", None),
        ("POST", "/runs/purge", {"status": "succeeded"}),
    ]
    for method, path, body in attempts:
        response = await api.request(method, path, json=body, headers=EVIL)
        assert response.status_code == 403, (method, path, response.text)
    assert await snapshot(redis_client, prefix) == before


async def test_fetch_metadata_alone_marks_a_cross_site_write(api: httpx.AsyncClient) -> None:
    run_id = await created(api)
    response = await api.post(f"/runs/{run_id}/cancel", headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    same = await api.post(f"/runs/{run_id}/cancel", headers={"Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 202


async def test_the_consoles_own_origin_and_plain_clients_may_write(api: httpx.AsyncClient) -> None:
    # the console is served by the API itself: its Origin names the Host it talks to
    own = await api.post("/runs", json=ECHO, headers={"Origin": "http://localhost"})
    assert own.status_code == 201
    # curl, httpx and the CLI send no Origin at all
    plain = await api.post(f"/runs/{own.json()['id']}/cancel")
    assert plain.status_code == 202


async def test_reads_from_a_foreign_origin_are_left_to_cors(api: httpx.AsyncClient) -> None:
    # a foreign page can send a GET but its browser will not let it read the answer
    assert (await api.get("/runs", headers=EVIL)).status_code == 200


@pytest.fixture
async def cors_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"cors_origins": ["https://app.example"]}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_an_origin_named_in_cors_origins_may_write(cors_api: httpx.AsyncClient) -> None:
    named = await cors_api.post("/runs", json=ECHO, headers={"Origin": "https://app.example"})
    assert named.status_code == 201
    assert named.headers["access-control-allow-origin"] == "https://app.example"
    other = await cors_api.post("/runs", json=ECHO, headers={"Origin": "https://other.example"})
    assert other.status_code == 403
