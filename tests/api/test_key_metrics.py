"""What /metrics shows of keys, refusals, audit losses and stream tokens after each happens.

A real redis-server. Counters are per process and other tests bump them too, so each
test compares two scrapes around its action.
"""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from app.settings import Settings
from app.store.signing.store import SigningKeys
from app.tokens.verify import STREAM_AUDIENCE
from tests.api.conftest import BOOTSTRAP

ADMIN = {"Authorization": f"Bearer {BOOTSTRAP}"}
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed_settings(settings: Settings) -> Settings:
    """Keys on, and every lookup asks Redis (no cache): each call is counted."""
    return settings.model_copy(update={"api_keys": [BOOTSTRAP], "key_cache_ttl_s": 0.0})


@pytest.fixture
def api(keyed_api: httpx.AsyncClient) -> httpx.AsyncClient:
    return keyed_api


async def scrape(api: httpx.AsyncClient, name: str) -> float:
    """One sample (name with its labels) of a fresh scrape; 0 when not shown yet."""
    response = await api.get("/metrics", headers=ADMIN)
    assert response.status_code == 200, response.text
    for line in response.text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[-1])
    return 0.0


async def new_key(api: httpx.AsyncClient, role: str = "read") -> dict[str, str]:
    response = await api.post("/keys", json={"name": "m", "role": role}, headers=ADMIN)
    assert response.status_code == 201, response.text
    created: dict[str, str] = response.json()
    return created


async def test_live_keys_follow_creates_and_revocations(api: httpx.AsyncClient) -> None:
    assert await scrape(api, "leasehold_api_keys_live") == 0
    first = await new_key(api)
    await new_key(api)
    assert await scrape(api, "leasehold_api_keys_live") == 2
    assert (await api.delete(f"/keys/{first['id']}", headers=ADMIN)).status_code == 204
    assert await scrape(api, "leasehold_api_keys_live") == 1


async def test_refusals_are_counted_by_reason(api: httpx.AsyncClient, keyed_app: FastAPI) -> None:
    unknown = 'leasehold_auth_refusals_total{reason="unknown_key"}'
    role = 'leasehold_auth_refusals_total{reason="role"}'
    expired = 'leasehold_auth_refusals_total{reason="expired"}'
    before = {name: await scrape(api, name) for name in (unknown, role, expired)}

    assert (await api.get("/runs")).status_code == 401
    assert (await api.get("/runs", headers=bearer("lh_not-a-key"))).status_code == 401
    reader = await new_key(api, "read")
    assert (await api.post("/runs", json=ECHO, headers=bearer(reader["secret"]))).status_code == 403
    run_id = (await api.post("/runs", json=ECHO, headers=ADMIN)).json()["id"]
    signing: SigningKeys = keyed_app.state.leasehold.signing
    now_s = await signing.now_ms() // 1000
    stale = await signing.sign(
        {"sub": run_id, "aud": STREAM_AUDIENCE, "iat": now_s - 600, "exp": now_s - 300}
    )
    answer = await api.get(f"/runs/{run_id}/events", params={"access_token": stale})
    assert answer.status_code == 401

    assert await scrape(api, unknown) == before[unknown] + 2
    assert await scrape(api, role) == before[role] + 1
    assert await scrape(api, expired) == before[expired] + 1


async def test_a_lost_audit_entry_is_counted(
    api: httpx.AsyncClient, keyed_app: FastAPI, redis_client: aioredis.Redis
) -> None:
    name = "leasehold_audit_append_failures_total"
    before = await scrape(api, name)
    assert (await api.put("/queues/audited", headers=ADMIN)).status_code in (200, 201)
    assert await scrape(api, name) == before
    # the audit stream's key holding a string: Redis refuses the XADD (WRONGTYPE)
    await redis_client.delete(keyed_app.state.leasehold.audit.key)
    await redis_client.set(keyed_app.state.leasehold.audit.key, "not a stream")
    assert (await api.put("/queues/audited", headers=ADMIN)).status_code in (200, 201)
    assert await scrape(api, name) == before + 1


async def test_issued_stream_tokens_are_counted(api: httpx.AsyncClient) -> None:
    name = "leasehold_stream_tokens_issued_total"
    before = await scrape(api, name)
    run_id = (await api.post("/runs", json=ECHO, headers=ADMIN)).json()["id"]
    for _ in range(2):
        response = await api.post(f"/runs/{run_id}/stream-token", headers=ADMIN)
        assert response.status_code == 200, response.text
    assert (await api.post("/runs/default.nope/stream-token", headers=ADMIN)).status_code in (
        404,
        422,
    )
    assert await scrape(api, name) == before + 2
