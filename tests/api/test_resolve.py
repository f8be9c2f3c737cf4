"""POST /runs/{id}/resolve: a person's decision on a run whose effect outcome is unknown."""

from __future__ import annotations

import httpx
import pytest

from app.store.leases.store import LeaseStore
from app.store.progress.store import ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.reconciliation import park_on_unknown_effect


@pytest.fixture
async def parked_id(run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore) -> str:
    return (await park_on_unknown_effect(run_store, lease_store, progress)).id


async def event_types(run_store: RunStore, run_id: str) -> list[str]:
    return [event.type for event in await run_store.read_events(run_id)]


async def test_a_parked_run_shows_the_unknown_effect_as_evidence(
    api: httpx.AsyncClient, parked_id: str
) -> None:
    run = (await api.get(f"/runs/{parked_id}")).json()
    assert run["status"] == "reconciliation_required"
    assert run["error"]["code"] == "effect_outcome_unknown"
    assert run["error"]["details"]["effect"]["key"] == f"{parked_id}:charge:1"


async def test_resolve_retry_queues_the_run_again_with_a_new_fence(
    api: httpx.AsyncClient, parked_id: str, run_store: RunStore, progress: ProgressStore
) -> None:
    before = (await api.get(f"/runs/{parked_id}")).json()
    response = await api.post(
        f"/runs/{parked_id}/resolve",
        json={"action": "retry", "effect_outcome": "applied", "effect_result": {"id": "ch_9"}},
    )
    assert response.status_code == 200
    run = response.json()
    assert run["status"] == "queued"
    assert run["fence"] == before["fence"] + 1
    assert run["error"] is None
    assert (await event_types(run_store, parked_id))[-1] == "resolved"
    records = await progress.effects("default", parked_id)
    assert records["charge:1"]["status"] == "done"
    assert records["charge:1"]["result"] == {"id": "ch_9"}


async def test_resolve_fail_ends_the_run_failed(
    api: httpx.AsyncClient, parked_id: str, run_store: RunStore
) -> None:
    response = await api.post(
        f"/runs/{parked_id}/resolve", json={"action": "fail", "note": "charged twice before"}
    )
    assert response.status_code == 200
    run = response.json()
    assert run["status"] == "failed"
    assert run["error"]["code"] == "resolved_as_failed"
    assert run["error"]["details"]["decision"]["note"] == "charged twice before"
    assert (await event_types(run_store, parked_id))[-2:] == ["resolved", "failed"]


async def test_resolve_succeed_ends_the_run_with_the_given_output(
    api: httpx.AsyncClient, parked_id: str, run_store: RunStore
) -> None:
    response = await api.post(
        f"/runs/{parked_id}/resolve",
        json={"action": "succeed", "output": {"receipt": "r-1"}, "effect_outcome": "applied"},
    )
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"
    assert response.json()["output"] == {"receipt": "r-1"}
    assert (await event_types(run_store, parked_id))[-2:] == ["resolved", "succeeded"]


async def test_resolve_of_a_run_in_any_other_state_is_409(
    api: httpx.AsyncClient, run_store: RunStore, parked_id: str
) -> None:
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    response = await api.post(f"/runs/{queued}/resolve", json={"action": "fail"})
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "queued" in response.json()["detail"]
    await api.post(f"/runs/{parked_id}/resolve", json={"action": "fail"})
    again = await api.post(f"/runs/{parked_id}/resolve", json={"action": "fail"})
    assert again.status_code == 409


async def test_resolve_of_an_unknown_run_is_404(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/runs/default.01J00000000000000000000000/resolve", json={"action": "fail"}
    )
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    "body",
    [
        {"action": "retry"},
        {"action": "again"},
        {"action": "fail", "output": 1},
        {"action": "fail", "effect_outcome": "maybe"},
        {"action": "retry", "effect_outcome": "not_applied", "effect_result": 1},
        {"action": "fail", "extra": True},
    ],
)
async def test_an_inconsistent_decision_is_422_and_changes_nothing(
    api: httpx.AsyncClient, parked_id: str, body: dict[str, object]
) -> None:
    response = await api.post(f"/runs/{parked_id}/resolve", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get(f"/runs/{parked_id}")).json()["status"] == "reconciliation_required"
