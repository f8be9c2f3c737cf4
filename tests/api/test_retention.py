"""retention_s and queued_ttl_s on POST /runs: bounded per run, hostile values refused."""

from __future__ import annotations

import httpx
import pytest

from app.settings import Settings


@pytest.mark.parametrize("name", ["retention_s", "queued_ttl_s"])
@pytest.mark.parametrize("value", [-1, 0, -0.0, "3600", True, [], {}, 10**40, 10**400])
async def test_a_hostile_per_run_duration_is_refused_and_creates_nothing(
    api: httpx.AsyncClient, name: str, value: object
) -> None:
    response = await api.post("/runs", json={"handler": "demo.echo", name: value})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get("/runs")).json()["items"] == []


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_a_non_finite_retention_is_refused(api: httpx.AsyncClient, literal: str) -> None:
    body = '{"handler": "demo.echo", "retention_s": ' + literal + "}"
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert (await api.get("/runs")).json()["items"] == []


@pytest.mark.parametrize(
    ("name", "limit"), [("retention_s", "retention_max_s"), ("queued_ttl_s", "queued_ttl_max_s")]
)
async def test_a_per_run_duration_past_its_bound_is_refused(
    api: httpx.AsyncClient, settings: Settings, name: str, limit: str
) -> None:
    bound = getattr(settings, limit)
    response = await api.post("/runs", json={"handler": "demo.echo", name: bound + 1})
    assert response.status_code == 422
    assert f"{bound:g}" in response.json()["detail"]
    accepted = await api.post("/runs", json={"handler": "demo.echo", name: bound})
    assert accepted.status_code == 201, accepted.text


async def test_a_run_shows_the_retention_it_asked_for(api: httpx.AsyncClient) -> None:
    created = await api.post("/runs", json={"handler": "demo.echo", "retention_s": 90})
    assert created.status_code == 201
    assert created.json()["retention_s"] == 90
    assert (await api.get(f"/runs/{created.json()['id']}")).json()["retention_s"] == 90
