"""GET /queues/{name}/series: per-minute outcomes, counted by the scripts that end runs."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.store.keys import QueueKeys
from app.store.leases.store import LeaseStore, Outcome
from app.store.queues.series import SERIES_MINUTES
from tests.support.polling import eventually

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


def totals(series: dict[str, object]) -> dict[str, int]:
    """Every kind summed over the window (a test may straddle a minute's end)."""
    buckets = series["buckets"]
    assert isinstance(buckets, list)
    kinds = ("succeeded", "failed", "cancelled", "orphaned", "expired", "lease_expired")
    return {kind: sum(int(bucket[kind]) for bucket in buckets) for kind in kinds}


async def test_a_quiet_queue_answers_sixty_zero_buckets_oldest_first(
    api: httpx.AsyncClient,
) -> None:
    response = await api.get("/queues/default/series")
    assert response.status_code == 200
    series = response.json()
    assert series["queue"] == "default" and series["bucket_s"] == 60
    starts = [bucket["start"] for bucket in series["buckets"]]
    assert len(starts) == SERIES_MINUTES and starts == sorted(starts)
    assert set(totals(series).values()) == {0}
    assert len((await api.get("/queues/default/series?minutes=5")).json()["buckets"]) == 5


async def test_outcomes_are_counted_by_status_in_buckets_that_expire(
    api: httpx.AsyncClient, lease_store: LeaseStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    ids = [(await api.post("/runs", json=ECHO)).json()["id"] for _ in range(4)]
    claimed = (await lease_store.claim("default", "w-a", 3)).runs
    ok, bad, _ = claimed
    error = '{"code":"x","message":"x","retryable":false}'
    await lease_store.finish_and_claim(
        "default",
        "w-a",
        [
            Outcome(ok.lease, RunStatus.SUCCEEDED, output_json="1"),
            Outcome(bad.lease, RunStatus.FAILED, error_json=error),
        ],
        0,
    )
    assert (await api.post(f"/runs/{ids[3]}/cancel")).json()["status"] == "cancelled"
    series = (await api.get("/queues/default/series")).json()
    assert totals(series) == {
        "succeeded": 1,
        "failed": 1,
        "cancelled": 1,
        "orphaned": 0,
        "expired": 0,
        "lease_expired": 0,
    }
    # the counters are bounded: one hash per minute, each with its hour-long TTL
    buckets = await redis_client.keys(f"{QueueKeys(prefix, 'default').tag}:series:*")
    assert 1 <= len(buckets) <= 2
    for key in buckets:
        assert 0 < await redis_client.pttl(key) <= 61 * 60_000


async def test_an_expired_lease_counts_as_lease_expired_and_orphaned(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    await api.post("/runs", json={**ECHO, "on_lease_expired": "orphan"})
    assert len((await lease_store.claim("default", "w-dead", 1)).runs) == 1
    # nobody renews: once the 1 s lease runs out the reconciler orphans the run
    await eventually(
        lambda: lease_store.reconcile("default"), until=bool, timeout_s=10, what="reconcile"
    )
    counted = totals((await api.get("/queues/default/series")).json())
    assert (counted["lease_expired"], counted["orphaned"]) == (1, 1)


@pytest.mark.parametrize("minutes", ["0", "61", "-1", "abc", "1e3", "9" * 40, "1.5", ""])
async def test_a_window_outside_one_to_sixty_minutes_is_422(
    api: httpx.AsyncClient, minutes: str
) -> None:
    response = await api.get("/queues/default/series", params={"minutes": minutes})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_an_undeclared_queue_has_no_series_404_and_gains_no_keys(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    responses = await asyncio.gather(*(api.get(f"/queues/nobody{i}/series") for i in range(50)))
    assert {response.status_code for response in responses} == {404}
    assert responses[0].headers["content-type"].startswith("application/problem+json")
    assert await redis_client.keys(f"{prefix}:{{nobody*") == []
    assert (await api.get("/queues/x:y/series")).status_code == 422


async def test_a_hand_off_given_back_unread_is_no_lease_expiry(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    """A worker registered for a hand-off and died: the run is released, not alerted on."""
    registration = await lease_store.claim("default", "w-dead", 1, handoff_ms=60_000)
    assert registration.runs == [] and registration.registered
    run_id = (await api.post("/runs", json=ECHO)).json()["id"]
    assert (await api.get(f"/runs/{run_id}")).json()["owner_id"] == "w-dead"
    # nobody reads the inbox: once the 1 s lease runs out the reconciler gives the run back
    actions = await eventually(
        lambda: lease_store.reconcile("default"), until=bool, timeout_s=10, what="reconcile"
    )
    assert [(a.run_id, a.action) for a in actions] == [(run_id, "released")]
    assert (await api.get(f"/runs/{run_id}")).json()["status"] == "queued"
    assert set(totals((await api.get("/queues/default/series")).json()).values()) == {0}
