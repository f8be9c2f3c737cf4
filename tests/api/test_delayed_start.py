"""Delayed start (run_at / delay_s): what a client sees before, at and after the time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.settings import Settings
from app.store.leases.store import LeaseStore
from app.store.runs.store import RunStore
from tests.support.polling import eventually, wait_status

ECHO = {"handler": "demo.echo", "input": {"message": "later"}}


async def test_a_delayed_run_is_queued_with_its_time_and_a_wait_event(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    response = await api.post("/runs", json={**ECHO, "delay_s": 60})
    assert response.status_code == 201
    run = response.json()
    assert run["status"] == "queued"
    run_at = datetime.fromisoformat(run["run_at"])
    created_at = datetime.fromisoformat(run["created_at"])
    assert timedelta(seconds=59) < run_at - created_at <= timedelta(seconds=61)
    assert (await api.get(f"/runs/{run['id']}")).json()["run_at"] == run["run_at"]
    events = await run_store.read_events(run["id"])
    assert [event.type for event in events] == ["created", "wait"]
    assert events[1].data["kind"] == "run_at"
    assert events[1].data["until_ms"] == int(run_at.timestamp() * 1000)


async def test_a_delayed_run_is_not_claimed_before_its_time_and_is_after(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    at = datetime.now(tz=UTC) + timedelta(seconds=1.5)
    run = (await api.post("/runs", json={**ECHO, "run_at": at.isoformat()})).json()
    early = await lease_store.claim("default", "w-early", 10)
    assert early.runs == []
    assert early.next_due_ms == int(datetime.fromisoformat(run["run_at"]).timestamp() * 1000)
    claim = await eventually(
        lambda: lease_store.claim("default", "w-late", 10),
        until=lambda claim: bool(claim.runs),
        timeout_s=30,
        what="the delayed run to become claimable",
    )
    assert [claimed.id for claimed in claim.runs] == [run["id"]]
    started = await run_store.get(run["id"])
    assert started.started_at is not None and started.run_at is not None
    assert started.started_at >= started.run_at


async def test_a_past_run_at_starts_at_once_without_a_wait(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    past = datetime.now(tz=UTC) - timedelta(hours=1)
    run = (await api.post("/runs", json={**ECHO, "run_at": past.isoformat()})).json()
    assert run["run_at"] is None
    assert [e.type for e in await run_store.read_events(run["id"])] == ["created"]
    assert [r.id for r in (await lease_store.claim("default", "w", 10)).runs] == [run["id"]]


async def test_cancel_before_its_time_ends_it_cancelled_without_a_start(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    run = (await api.post("/runs", json={**ECHO, "delay_s": 0.5})).json()
    assert (await api.post(f"/runs/{run['id']}/cancel")).status_code == 202
    cancelled = await wait_status(run_store, run["id"], RunStatus.CANCELLED)
    assert cancelled.started_at is None
    assert await eventually(
        lambda: lease_store.claim("default", "w", 10),
        until=lambda claim: claim.next_due_ms is None,
        what="the delayed set to forget the cancelled run",
    )
    types = [e.type for e in await run_store.read_events(run["id"])]
    assert types == ["created", "wait", "cancelled"]


async def test_the_queued_ttl_of_a_delayed_run_counts_from_its_start(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, run_store: RunStore
) -> None:
    run = (await api.post("/runs", json={**ECHO, "delay_s": 3600, "queued_ttl_s": 10})).json()
    expires_ms = await redis_client.zscore(run_store.keys("default").unclaimed, run["id"])
    run_at_ms = datetime.fromisoformat(run["run_at"]).timestamp() * 1000
    assert expires_ms == pytest.approx(run_at_ms + 10_000, abs=2)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"delay_s": -1}, "delay_s"),
        ({"delay_s": "5"}, "delay_s"),
        ({"delay_s": 1e300}, "LEASEHOLD_START_MAX_AHEAD_S"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"run_at": "2026-12-31T00:00:00"}, "run_at"),  # no offset: which zone?
        ({"run_at": 1893456000}, "run_at"),
        ({"run_at": "9999-12-31T23:59:59Z"}, "LEASEHOLD_START_MAX_AHEAD_S"),
        ({"run_at": "2026-12-31T00:00:00Z", "delay_s": 1}, "not both"),
    ],
)
async def test_hostile_start_times_are_422_and_write_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    extra: dict[str, object],
    needle: str,
) -> None:
    before = sorted(await redis_client.keys(f"{settings.prefix}:*"))
    response = await api.post("/runs", json={**ECHO, **extra})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert needle in response.text
    assert sorted(await redis_client.keys(f"{settings.prefix}:*")) == before


async def test_a_batch_item_may_be_delayed(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/batch", json={"items": [{**ECHO, "delay_s": 30}, ECHO]})
    assert response.status_code == 200
    first, second = (item["run"] for item in response.json()["items"])
    assert first["run_at"] is not None and second["run_at"] is None


async def test_a_delayed_create_replays_with_the_same_key_and_conflicts_with_another_time(
    api: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "later-1"}
    later = datetime.now(tz=UTC) + timedelta(days=30)
    body = {**ECHO, "run_at": later.isoformat()}
    first = await api.post("/runs", json=body, headers=headers)
    again = await api.post("/runs", json=body, headers=headers)
    other = await api.post(
        "/runs", json={**body, "run_at": (later + timedelta(days=1)).isoformat()}, headers=headers
    )
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
