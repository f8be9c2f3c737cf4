"""Stored API keys through the API: create, list, rotate with grace, revoke, expire;
hostile bodies; the audit stream of operate/admin calls. A real redis-server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from app.models.keys import KEY_EXPIRY_MAX_S
from app.settings import Settings
from tests.api.conftest import BOOTSTRAP, api_with

ADMIN = {"Authorization": f"Bearer {BOOTSTRAP}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed_settings(settings: Settings) -> Settings:
    # no cache: these tests see a revocation at once (the cache has its own test)
    return settings.model_copy(update={"api_keys": [BOOTSTRAP], "key_cache_ttl_s": 0.0})


@pytest.fixture
async def keyed_api(keyed_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=keyed_app, client=("203.0.113.7", 4242))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def create(api: httpx.AsyncClient, **body: object) -> dict[str, object]:
    response = await api.post("/keys", json={"name": "ci", "role": "read", **body}, headers=ADMIN)
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


async def test_a_created_key_works_with_its_role_and_is_listed_without_its_secret(
    keyed_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    created = await create(keyed_api, name="dashboards", role="read")
    secret = str(created["secret"])
    assert secret.startswith("lh_") and len(secret) > 40
    assert (await keyed_api.get("/runs", headers=bearer(secret))).status_code == 200
    refused = await keyed_api.post("/runs", json={}, headers=bearer(secret))
    assert refused.status_code == 403
    assert refused.json()["required_role"] == "submit"
    listing = await keyed_api.get("/keys", headers=ADMIN)
    assert listing.status_code == 200
    [item] = listing.json()["items"]
    assert item["id"] == created["id"] and item["role"] == "read" and item["name"] == "dashboards"
    assert secret not in listing.text and "secret" not in item and "digest" not in item
    # stored hashed: the secret is nowhere in Redis
    for key in await redis_client.keys(f"{prefix}:*"):
        kind = await redis_client.type(key)
        if kind == "hash":
            assert secret not in str(await redis_client.hgetall(key)), key
        assert secret not in key


async def test_rotation_keeps_the_old_secret_during_the_grace_then_not(
    keyed_api: httpx.AsyncClient,
) -> None:
    created = await create(keyed_api, role="submit")
    old = str(created["secret"])
    rotated = await keyed_api.post(
        f"/keys/{created['id']}/rotate", json={"grace_s": 1}, headers=ADMIN
    )
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    assert new != old and rotated.json()["id"] == created["id"]
    assert rotated.json()["previous_valid_until"] is not None
    for secret in (old, new):
        assert (await keyed_api.get("/handlers", headers=bearer(secret))).status_code == 200
    await asyncio.sleep(1.3)
    assert (await keyed_api.get("/handlers", headers=bearer(old))).status_code == 401
    assert (await keyed_api.get("/handlers", headers=bearer(new))).status_code == 200


async def test_a_second_rotation_ends_the_first_secrets_grace(
    keyed_api: httpx.AsyncClient,
) -> None:
    created = await create(keyed_api)
    first = str(created["secret"])
    url = f"/keys/{created['id']}/rotate"
    second = (await keyed_api.post(url, json={}, headers=ADMIN)).json()["secret"]
    third = (await keyed_api.post(url, json={}, headers=ADMIN)).json()["secret"]
    assert (await keyed_api.get("/handlers", headers=bearer(first))).status_code == 401
    for secret in (second, third):
        assert (await keyed_api.get("/handlers", headers=bearer(secret))).status_code == 200


async def test_revoked_keys_and_both_their_secrets_are_refused(
    keyed_api: httpx.AsyncClient,
) -> None:
    created = await create(keyed_api, role="admin")
    old = str(created["secret"])
    new = (await keyed_api.post(f"/keys/{created['id']}/rotate", json={}, headers=ADMIN)).json()[
        "secret"
    ]
    assert (await keyed_api.delete(f"/keys/{created['id']}", headers=ADMIN)).status_code == 204
    for secret in (old, new):
        response = await keyed_api.get("/handlers", headers=bearer(secret))
        assert response.status_code == 401
        assert response.headers["www-authenticate"].endswith('error="invalid_token"')
    assert (await keyed_api.get("/keys", headers=ADMIN)).json()["items"] == []
    assert (await keyed_api.delete(f"/keys/{created['id']}", headers=ADMIN)).status_code == 404
    missing = await keyed_api.post(f"/keys/{created['id']}/rotate", json={}, headers=ADMIN)
    assert missing.status_code == 404


async def test_a_key_expires(keyed_api: httpx.AsyncClient) -> None:
    created = await create(keyed_api, expires_in_s=1)
    assert created["expires_at"] is not None
    secret = str(created["secret"])
    assert (await keyed_api.get("/handlers", headers=bearer(secret))).status_code == 200
    await asyncio.sleep(1.3)
    assert (await keyed_api.get("/handlers", headers=bearer(secret))).status_code == 401
    assert (await keyed_api.get("/keys", headers=ADMIN)).json()["items"] == []


async def test_a_revocation_reaches_a_caching_process_within_its_ttl(
    keyed_settings: Settings, keyed_api: httpx.AsyncClient
) -> None:
    async with api_with(keyed_settings, key_cache_ttl_s=0.5) as other:
        created = await create(keyed_api)
        secret = bearer(str(created["secret"]))
        assert (await other.get("/handlers", headers=secret)).status_code == 200
        await keyed_api.delete(f"/keys/{created['id']}", headers=ADMIN)
        # cached: still good in the other process, for at most its TTL
        assert (await other.get("/handlers", headers=secret)).status_code == 200
        await asyncio.sleep(0.6)
        assert (await other.get("/handlers", headers=secret)).status_code == 401


HOSTILE = [
    pytest.param({"name": "x" * 10_000, "role": "read"}, id="huge-name"),
    pytest.param({"name": "", "role": "read"}, id="empty-name"),
    pytest.param({"name": "a b\n", "role": "read"}, id="control-chars"),
    pytest.param({"name": "ci", "role": "root"}, id="unknown-role"),
    pytest.param({"name": "ci", "role": "READ "}, id="near-role"),
    pytest.param({"name": "ci"}, id="no-role"),
    pytest.param({"name": "ci", "role": "read", "expires_in_s": -5}, id="negative-expiry"),
    pytest.param({"name": "ci", "role": "read", "expires_in_s": 0}, id="zero-expiry"),
    pytest.param(
        {"name": "ci", "role": "read", "expires_in_s": KEY_EXPIRY_MAX_S + 1}, id="huge-expiry"
    ),
    pytest.param({"name": "ci", "role": "read", "expires_in_s": 2**70}, id="overflow-expiry"),
    pytest.param({"name": "ci", "role": "read", "expires_in_s": 1.5}, id="fractional-expiry"),
    pytest.param({"name": "ci", "role": "read", "namespaces": "b"}, id="unknown-field"),
    pytest.param({"name": "ci", "role": "read", "namespace": "nope"}, id="undeclared-namespace"),
    pytest.param({"name": "ci", "role": "admin", "namespace": "default"}, id="bound-admin"),
    pytest.param({"name": "ci", "role": "read", "namespace": "Bad Name"}, id="bad-namespace"),
    pytest.param(["ci", "read"], id="not-an-object"),
]


@pytest.mark.parametrize("body", HOSTILE)
async def test_hostile_key_requests_are_422_and_write_nothing(
    keyed_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, body: object
) -> None:
    response = await keyed_api.post("/keys", json=body, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert await redis_client.keys(f"{prefix}:{{apikeys}}:*") == []


@pytest.mark.parametrize("grace", [-1, 10**9, "soon", 2**70])
async def test_hostile_rotations_are_422(keyed_api: httpx.AsyncClient, grace: object) -> None:
    created = await create(keyed_api)
    response = await keyed_api.post(
        f"/keys/{created['id']}/rotate", json={"grace_s": grace}, headers=ADMIN
    )
    assert response.status_code == 422
    bad_id = await keyed_api.delete("/keys/" + "k" * 300, headers=ADMIN)
    assert bad_id.status_code == 422


async def test_keys_are_bounded(keyed_settings: Settings) -> None:
    async with api_with(keyed_settings, max_api_keys=2) as api:
        await create(api)
        await create(api)
        third = await api.post("/keys", json={"name": "c", "role": "read"}, headers=ADMIN)
        assert third.status_code == 409
        assert third.json()["type"].endswith("key-limit-reached")


async def test_without_bootstrap_keys_no_key_can_be_created(api: httpx.AsyncClient) -> None:
    response = await api.post("/keys", json={"name": "ci", "role": "read"})
    assert response.status_code == 409
    assert "LEASEHOLD_API_KEYS" in response.json()["detail"]


async def test_secrets_never_reach_the_logs(
    keyed_api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    created = await create(keyed_api, role="operate")
    secret = str(created["secret"])
    rotated = await keyed_api.post(f"/keys/{created['id']}/rotate", json={}, headers=ADMIN)
    await keyed_api.put("/queues/audited", headers=bearer(secret))
    await keyed_api.get("/runs", headers=bearer(rotated.json()["secret"]))
    assert caplog.records, "something was logged at DEBUG"
    for record in caplog.records:
        text = record.getMessage()
        assert secret not in text and rotated.json()["secret"] not in text


async def test_operate_and_admin_calls_are_audited_and_reads_are_not(
    keyed_api: httpx.AsyncClient,
) -> None:
    operator = await create(keyed_api, name="ops-bot", role="operate")
    reader = await create(keyed_api, name="viewer", role="read")
    ops = bearer(str(operator["secret"]))
    assert (await keyed_api.put("/queues/audited", headers=ops)).status_code in (200, 201)
    assert (await keyed_api.get("/queues", headers=ops)).status_code == 200
    denied = await keyed_api.delete("/queues/audited", headers=bearer(str(reader["secret"])))
    assert denied.status_code == 403
    drained = await keyed_api.post("/workers/w-nobody/drain", headers=ADMIN)
    assert drained.status_code == 404
    page = await keyed_api.get("/audit", headers=ADMIN)
    assert page.status_code == 200
    entries = page.json()["items"]
    seen = [(e["key_name"], e["role"], e["method"], e["path"], e["status"]) for e in entries]
    # newest first; the GET /queues read is not there; POST /keys (admin) are
    assert seen[:3] == [
        ("bootstrap", "admin", "POST", "/workers/w-nobody/drain", 404),
        ("viewer", "read", "DELETE", "/queues/audited", 403),
        ("ops-bot", "operate", "PUT", "/queues/audited", seen[2][4]),
    ]
    assert {e["client"] for e in entries} == {"203.0.113.7"}
    assert entries[2]["key_id"] == operator["id"] and entries[2]["at"]
    assert [e["path"] for e in entries[3:]] == ["/keys", "/keys"]
    assert str(operator["secret"]) not in page.text
    # reading the audit is an admin call too: it is recorded after its own answer
    first = await keyed_api.get("/audit", params={"limit": 2}, headers=ADMIN)
    assert first.json()["items"][0]["path"] == "/audit"
    assert first.json()["items"][1]["id"] == entries[0]["id"]
    rest = await keyed_api.get(
        "/audit", params={"before": first.json()["next_cursor"]}, headers=ADMIN
    )
    assert [e["id"] for e in rest.json()["items"]] == [e["id"] for e in entries[1:]]
    assert (await keyed_api.get("/audit", headers=ops)).status_code == 403


async def test_the_audit_stream_is_capped(
    keyed_settings: Settings, redis_client: aioredis.Redis, prefix: str
) -> None:
    async with api_with(keyed_settings, audit_max_entries=100) as api:
        for _ in range(400):
            await api.put("/queues/capped", headers=ADMIN)
    assert 100 <= await redis_client.xlen(f"{prefix}:audit") < 400
