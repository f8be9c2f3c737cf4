"""/rate-limits: declare, read, undeclare; hostile input changes nothing; runs name start gates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.settings import Settings
from app.store.keys import GlobalKeys
from app.store.leases.store import LeaseStore
from tests.support.snapshots import changes, snapshot

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
OPENAI = {"limit": 60, "period_s": 60, "burst": 10}


@pytest.fixture
async def small_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An API that may declare at most 2 rate-limit keys."""
    app = create_app(settings.model_copy(update={"max_rate_limits": 2}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_declare_read_change_and_undeclare_a_key(api: httpx.AsyncClient) -> None:
    created = await api.put("/rate-limits/openai", json=OPENAI)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/rate-limits/openai"
    body = created.json()
    assert body["spec"] == {"limit": 60, "period_s": 60.0, "burst": 10}
    assert body["state"]["available"] == 10 and body["state"]["bucket"] == "openai"
    changed = await api.put("/rate-limits/openai", json={"limit": 30, "period_s": 60})
    assert changed.status_code == 200 and changed.json()["spec"]["limit"] == 30
    template = await api.put(f"/rate-limits/{quote('crm:{tenant}')}", json={"limit": 5})
    assert template.status_code == 201 and template.json()["template"] is True
    instance = (await api.get("/rate-limits/crm:acme")).json()
    assert instance["spec"]["limit"] == 5 and instance["state"]["bucket"] == "crm:acme"
    page = (await api.get("/rate-limits")).json()
    assert [item["key"] for item in page["items"]] == ["crm:{tenant}", "openai"]
    assert page["max_rate_limits"] == 1000
    assert (await api.delete("/rate-limits/openai")).status_code == 204
    gone = await api.get("/rate-limits/openai")
    assert gone.status_code == 404
    assert gone.json()["type"].endswith("rate-limit-not-declared")
    assert (await api.delete("/rate-limits/openai")).status_code == 404


async def test_declarations_past_the_bound_are_409_and_change_nothing(
    small_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    for name in ("a", "b"):
        assert (await small_api.put(f"/rate-limits/{name}", json=OPENAI)).status_code == 201
    full = await small_api.put("/rate-limits/c", json=OPENAI)
    assert full.status_code == 409
    assert full.json()["type"].endswith("rate-limits-full")
    assert "LEASEHOLD_MAX_RATE_LIMITS" in full.json()["detail"]
    assert (await small_api.put("/rate-limits/a", json={"limit": 1})).status_code == 200
    assert sorted(await redis_client.hkeys(GlobalKeys(prefix).rate_limits)) == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        '{"limit": 0}',
        '{"limit": -1}',
        '{"limit": 1000000000000}',
        '{"limit": 1, "period_s": 0}',
        '{"limit": 1, "period_s": 1e400}',
        '{"limit": 1, "period_s": NaN}',
        '{"limit": 1, "burst": 0}',
        '{"limit": 1, "unknown": 1}',
        '{"limit": "10"}',
        "{}",
        "[]",
        '{"limit": 1.5}',
        "[" * 5000 + "]" * 5000,
        "{",
    ],
)
async def test_hostile_specs_are_422_and_write_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, body: str
) -> None:
    before = await snapshot(redis_client, prefix)
    response = await api.put(
        "/rate-limits/openai", content=body, headers={"content-type": "application/json"}
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert not changes(before, await snapshot(redis_client, prefix))


@pytest.mark.parametrize(
    "name",
    ["a:b:c:d:e", "x" * 65, "bad%20key", quote("{tenant"), quote("crm:{Tenant}"), "a::b", "%00"],
)
async def test_hostile_key_names_are_refused_and_write_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, name: str
) -> None:
    before = await snapshot(redis_client, prefix)
    response = await api.put(f"/rate-limits/{name}", json=OPENAI)
    assert 400 <= response.status_code < 500, response.text
    assert not changes(before, await snapshot(redis_client, prefix))
    assert 400 <= (await api.get(f"/rate-limits/{name}")).status_code < 500


@pytest.mark.parametrize("name", ["{t}", "{tenant}:crm", "{a}:{b}"])
async def test_a_template_without_a_fixed_first_segment_is_422_and_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, name: str
) -> None:
    before = await snapshot(redis_client, prefix)
    response = await api.put(f"/rate-limits/{quote(name)}", json=OPENAI)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "not {tenant}" in response.json()["detail"]
    assert not changes(before, await snapshot(redis_client, prefix))


async def test_a_catch_all_declared_under_the_old_rule_can_still_be_forgotten(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await redis_client.hset(GlobalKeys(prefix).rate_limits, "{t}", '{"limit": 1}')
    assert (await api.delete(f"/rate-limits/{quote('{t}')}")).status_code == 204
    assert await redis_client.hlen(GlobalKeys(prefix).rate_limits) == 0


async def test_a_huge_key_name_is_refused(api: httpx.AsyncClient) -> None:
    response = await api.put("/rate-limits/" + "a" * 60_000, json=OPENAI)
    assert 400 <= response.status_code < 500


async def test_a_run_naming_an_undeclared_or_malformed_key_is_422_and_nothing_is_created(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await api.put(f"/rate-limits/{quote('crm:{tenant}')}", json={"limit": 5})
    assert (await api.post("/runs", json=ECHO)).status_code == 201  # the queue is announced
    before = await snapshot(redis_client, prefix)
    for names in (["openai"], ["crm:acme:eu"], ["crm:{tenant}"], ["a"] * 9, ["crm:a", "crm:a"]):
        response = await api.post("/runs", json={**ECHO, "rate_limits": names})
        assert response.status_code == 422, (names, response.text)
    batch = await api.post("/runs/batch", json={"items": [{**ECHO, "rate_limits": ["openai"]}]})
    assert batch.status_code == 200 and batch.json()["items"][0]["status"] == 422
    assert not changes(before, await snapshot(redis_client, prefix))
    ok = await api.post("/runs", json={**ECHO, "rate_limits": ["crm:acme"]})
    assert ok.status_code == 201, ok.text
    batch = await api.post("/runs/batch", json={"items": [{**ECHO, "rate_limits": ["crm:b"]}]})
    assert batch.json()["items"][0]["status"] == 201


async def test_a_queue_start_bucket_is_shown_with_queue(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    await api.put("/rate-limits/crm:acme", json={"limit": 5, "burst": 3})
    created = await api.post("/runs", json={**ECHO, "rate_limits": ["crm:acme"]})
    assert created.status_code == 201
    assert len((await lease_store.claim("default", "w-1", 5)).runs) == 1  # one start taken
    body = (await api.get("/rate-limits/crm:acme", params={"queue": "default"})).json()
    assert body["start_state"]["available"] == 2
    assert body["state"]["available"] == 3  # the handler bucket is another one
    assert (await api.get("/rate-limits/crm:acme")).json()["start_state"] is None
    undeclared = await api.get("/rate-limits/crm:acme", params={"queue": "nope"})
    assert undeclared.status_code == 422
