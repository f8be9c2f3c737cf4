"""A run's duration spans its attempts: the first claim's time is kept on the record."""

from __future__ import annotations

import httpx

from app.models import RunStatus
from app.store.leases.store import LeaseStore, Outcome
from tests.support.polling import eventually


async def test_first_started_at_survives_a_takeover_and_started_at_moves_on(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    body = {"handler": "demo.echo", "input": {}, "max_attempts": 2, "on_lease_expired": "retry"}
    run_id = (await api.post("/runs", json=body)).json()["id"]
    assert (await api.get(f"/runs/{run_id}")).json()["first_started_at"] is None
    assert len((await lease_store.claim("default", "w-lost", 1)).runs) == 1
    first = (await api.get(f"/runs/{run_id}")).json()
    assert first["first_started_at"] == first["started_at"] is not None
    # the first owner dies: its lease runs out, the run is queued again and claimed anew
    await eventually(
        lambda: lease_store.reconcile("default"), until=bool, timeout_s=10, what="requeue"
    )
    second = (await lease_store.claim("default", "w-b", 1)).runs[0]
    await lease_store.finish_and_claim(
        "default", "w-b", [Outcome(second.lease, RunStatus.SUCCEEDED, output_json="1")], 0
    )
    done = (await api.get(f"/runs/{run_id}")).json()
    assert done["status"] == "succeeded" and done["attempt"] == 2
    assert done["first_started_at"] == first["first_started_at"]
    assert done["started_at"] > done["first_started_at"]  # ISO times of one zone sort
    listed = (await api.get("/runs")).json()["items"][0]
    assert listed["first_started_at"] == first["first_started_at"]  # summaries carry it


async def test_a_parked_and_resumed_run_keeps_its_first_start(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    run_id = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()["id"]
    held = (await lease_store.claim("default", "w-a", 1)).runs[0]
    parked = Outcome(held.lease, RunStatus.WAITING_HUMAN, output_json='{"reason":"ask"}')
    await lease_store.finish_and_claim("default", "w-a", [parked], 0)
    first = (await api.get(f"/runs/{run_id}")).json()
    assert first["status"] == "waiting_human" and first["first_started_at"] is not None
    assert (await api.post(f"/runs/{run_id}/resume", json={"input": 1})).status_code == 202
    again = (await lease_store.claim("default", "w-b", 1)).runs[0]
    await lease_store.finish_and_claim(
        "default", "w-b", [Outcome(again.lease, RunStatus.SUCCEEDED, output_json="1")], 0
    )
    done = (await api.get(f"/runs/{run_id}")).json()
    assert done["first_started_at"] == first["first_started_at"]
    assert done["started_at"] >= done["first_started_at"]
    assert done["finished_at"] >= done["first_started_at"]
