"""/schedules: create, read, change, pause, delete; hostile input is a 4xx that writes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.settings import Settings

RUN = {"handler": "demo.echo", "input": {"message": "hi"}}
NIGHTLY = {"id": "nightly", "cron": "30 2 * * *", "timezone": "Europe/Berlin", "run": RUN}


async def keys_of(client: aioredis.Redis, prefix: str) -> list[str]:
    return sorted(await client.keys(f"{prefix}:*"))


async def test_create_returns_the_schedule_with_its_next_fire_times(api: httpx.AsyncClient) -> None:
    response = await api.post("/schedules", json=NIGHTLY)
    assert response.status_code == 201
    assert response.headers["location"] == "/schedules/nightly"
    schedule = response.json()
    assert schedule["overlap"] == "skip" and schedule["missed"] == "skip"
    assert len(schedule["next_fires"]) == 5
    assert schedule["next_fire_at"] == schedule["next_fires"][0]
    # 02:30 in Berlin is 01:30 UTC in winter
    assert all(fire.endswith("T01:30:00Z") for fire in schedule["next_fires"])
    assert (await api.get("/schedules/nightly")).json()["next_fires"] == schedule["next_fires"]
    listed = (await api.get("/schedules")).json()
    assert [item["id"] for item in listed["items"]] == ["nightly"]


async def test_the_same_id_twice_is_409(api: httpx.AsyncClient) -> None:
    assert (await api.post("/schedules", json=NIGHTLY)).status_code == 201
    again = await api.post("/schedules", json={**NIGHTLY, "cron": "0 * * * *"})
    assert again.status_code == 409
    assert (await api.get("/schedules/nightly")).json()["cron"] == "30 2 * * *"


async def test_patch_changes_the_spec_and_bumps_the_version(api: httpx.AsyncClient) -> None:
    await api.post("/schedules", json=NIGHTLY)
    changed = await api.patch("/schedules/nightly", json={"interval_s": 60, "overlap": "allow"})
    assert changed.status_code == 200
    body = changed.json()
    assert body["cron"] is None and body["interval_s"] == 60 and body["overlap"] == "allow"
    assert body["version"] == 2
    stale = await api.patch("/schedules/nightly", json={"version": 1, "missed": "all"})
    assert stale.status_code == 409
    moved = await api.patch("/schedules/nightly", json={"run": {**RUN, "queue": "other"}})
    assert moved.status_code == 422


async def test_delete_then_get_is_404_and_frees_its_place(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    await api.post("/schedules", json=NIGHTLY)
    assert (await api.delete("/schedules/nightly")).status_code == 204
    assert (await api.get("/schedules/nightly")).status_code == 404
    assert (await api.delete("/schedules/nightly")).status_code == 404
    assert await keys_of(redis_client, settings.prefix) == [f"{settings.prefix}:queues"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),  # never fires
        ({"cron": "*" * 300}, "cron"),
        ({"timezone": "Mars/Olympus_Mons"}, "time zone"),
        ({"timezone": "../../../etc/passwd"}, "time zone"),
        ({"cron": None, "interval_s": 0}, "interval_s"),
        ({"cron": None, "interval_s": -5}, "interval_s"),
        ({"cron": None, "interval_s": 0.001}, "LEASEHOLD_SCHEDULE_INTERVAL_MIN_S"),
        ({"cron": None, "interval_s": 1e300}, "interval_s"),
        ({"cron": None, "interval_s": "60"}, "interval_s"),
        ({"interval_s": 60}, "not both"),
        ({"cron": None}, "cron or interval_s"),
        ({"id": "has:colon"}, "id"),
        ({"id": "x" * 200}, "id"),
        ({"run": {"handler": "no.such.handler"}}, "handler"),
        ({"run": {**RUN, "queue": "nowhere"}}, "nowhere"),
        ({"run": {**RUN, "idempotency_key": "k"}}, "idempotency_key"),
        ({"run": {**RUN, "delay_s": 5}}, "delay_s"),
        ({"run": {"handler": "demo.echo", "input": {"message": 5}}}, "input"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"missed": "never"}, "missed"),
        ({"catchup_window_s": 1e12}, "LEASEHOLD_SCHEDULE_CATCHUP_WINDOW_MAX_S"),
        ({"catchup_window_s": float("nan")}, "catchup_window_s"),
        ({"run": None}, "run"),
        ({"surprise": 1}, "surprise"),
    ],
)
async def test_hostile_schedules_are_4xx_and_write_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    body: dict[str, Any],
    needle: str,
) -> None:
    await api.get("/queues")  # the API declares its queues on first use
    before = await keys_of(redis_client, settings.prefix)
    payload = {**NIGHTLY, **body}
    # json.dumps writes NaN as the bare token NaN, which the API's body rule refuses
    content = json.dumps(payload).encode()
    response = await api.post(
        "/schedules", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert needle in response.text
    assert await keys_of(redis_client, settings.prefix) == before


@pytest.mark.parametrize(
    "body",
    [
        {"start": "2026-01-01T00:00:00Z", "end": "2026-12-31T00:00:00Z"},  # 8,000 hours
        {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"},
        {"start": "yesterday", "end": "2026-01-01T00:00:00Z"},
        {"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00"},
        {"start": "0001-01-01T00:00:00Z", "end": "9999-12-31T00:00:00Z"},
    ],
)
async def test_a_huge_or_malformed_backfill_is_422_and_fires_nothing(
    api: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    await api.post("/schedules", json={**NIGHTLY, "cron": "0 * * * *"})
    response = await api.post("/schedules/nightly/backfill", json=body)
    assert response.status_code == 422, response.text
    assert (await api.get("/schedules/nightly")).json()["fired_count"] == 0
    assert (await api.get("/runs")).json()["items"] == []


async def test_unknown_schedules_are_404(api: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/schedules/ghost"),
        ("PATCH", "/schedules/ghost"),
        ("POST", "/schedules/ghost/pause"),
        ("POST", "/schedules/ghost/resume"),
        ("POST", "/schedules/ghost/trigger"),
        ("DELETE", "/schedules/ghost"),
    ]:
        kwargs: dict[str, Any] = {"json": {"missed": "all"}} if method == "PATCH" else {}
        assert (await api.request(method, path, **kwargs)).status_code == 404, path
    backfill = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
    assert (await api.post("/schedules/ghost/backfill", json=backfill)).status_code == 404


@pytest.fixture
async def small_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"schedule_max": 2}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_past_schedule_max_a_create_is_409_and_a_delete_makes_room(
    small_api: httpx.AsyncClient,
) -> None:
    for name in ("a", "b"):
        assert (await small_api.post("/schedules", json={**NIGHTLY, "id": name})).status_code == 201
    full = await small_api.post("/schedules", json={**NIGHTLY, "id": "c"})
    assert full.status_code == 409
    assert "LEASEHOLD_SCHEDULE_MAX" in full.json()["detail"]
    await small_api.delete("/schedules/a")
    assert (await small_api.post("/schedules", json={**NIGHTLY, "id": "c"})).status_code == 201
