"""POST /runs/{id}/retry: what a client sees, hostile input first, and a real worker's re-run."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import TERMINAL_EVENT_TYPES, RunStatus
from app.settings import Settings
from app.store.runs.store import RunStore
from tests.support.effect_handlers import fail_flag_key, tag_calls_key
from tests.support.polling import wait_status
from tests.support.processes import Processes
from tests.support.snapshots import changes, snapshot

UNKNOWN = "default.01J00000000000000000000000"


async def cancelled_run(api: httpx.AsyncClient) -> str:
    run = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()
    assert (await api.post(f"/runs/{run['id']}/cancel")).json()["status"] == "cancelled"
    return str(run["id"])


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"checkpoint": "maybe"}, 422),
        ({"max_attempts": 0}, 422),
        ({"max_attempts": 10**9}, 422),
        ({"max_attempts": "3"}, 422),
        ({"idempotency_key": "x" * 1000}, 422),
        ({"idempotency_key": "bad key"}, 422),
        ({"surprise": True}, 422),
        ([1, 2], 422),
        ({"checkpoint": "keep", "deep": [[[[[[]]]]]]}, 422),
    ],
)
async def test_a_hostile_body_is_a_problem_and_changes_nothing(
    body: object,
    status: int,
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    run_id = await cancelled_run(api)
    before = await snapshot(redis_client, settings.prefix)
    response = await api.post(f"/runs/{run_id}/retry", json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    after = await snapshot(redis_client, settings.prefix)
    assert not changes(before, after)


async def test_unknown_and_malformed_ids_are_404_and_422(api: httpx.AsyncClient) -> None:
    unknown = await api.post(f"/runs/{UNKNOWN}/retry")
    assert unknown.status_code == 404
    assert unknown.json()["type"].endswith("run-not-found")
    assert (await api.post(f"/runs/{'x' * 5000}/retry")).status_code in (404, 422)
    assert (await api.post("/runs/no-queue-here/retry")).status_code == 422


async def test_a_live_run_is_409_and_nothing_is_created(api: httpx.AsyncClient) -> None:
    run = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()
    response = await api.post(f"/runs/{run['id']}/retry")
    assert response.status_code == 409
    assert "queued" in response.json()["detail"]
    listed = (await api.get("/runs")).json()["items"]
    assert [item["id"] for item in listed] == [run["id"]]


async def test_retry_answers_201_with_the_new_run_and_a_replay_answers_200(
    api: httpx.AsyncClient,
) -> None:
    old_id = await cancelled_run(api)
    first = await api.post(f"/runs/{old_id}/retry", headers={"Idempotency-Key": "fix-1"})
    assert first.status_code == 201
    new = first.json()
    assert first.headers["location"] == f"/runs/{new['id']}"
    assert new["retry_of"] == old_id and new["status"] == "queued"
    assert (await api.get(f"/runs/{old_id}")).json()["retried_by"] == new["id"]
    again = await api.post(f"/runs/{old_id}/retry", json={"idempotency_key": "fix-1"})
    assert again.status_code == 200
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json()["id"] == new["id"]
    other = await api.post(f"/runs/{old_id}/retry")
    assert other.status_code == 409
    assert other.json()["type"].endswith("already-retried")
    assert new["id"] in other.json()["detail"]
    differ = await api.post(
        f"/runs/{old_id}/retry", json={"idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
    )
    assert differ.status_code == 400


async def test_a_rerun_of_a_failed_run_does_not_call_its_recorded_effect_again(
    api: httpx.AsyncClient,
    processes: Processes,
    run_store: RunStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    """The issue's case, with a real worker: charge, fail; re-run; the charge is replayed."""
    tag = "order-7"
    await redis_client.set(fail_flag_key(settings.prefix, tag), "1")
    body = {"handler": "test.charge_then_fail", "input": {"tag": tag}}
    old_id = (await api.post("/runs", json=body)).json()["id"]
    processes.worker()
    failed = await wait_status(run_store, old_id, RunStatus.FAILED, RunStatus.SUCCEEDED)
    assert failed.status == RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "refused"
    calls = tag_calls_key(settings.prefix, tag)
    assert await redis_client.lrange(calls, 0, -1) == [f"{old_id}:charge:1"]

    await redis_client.delete(fail_flag_key(settings.prefix, tag))  # the operator fixed it
    new_id = (await api.post(f"/runs/{old_id}/retry")).json()["id"]
    done = await wait_status(run_store, new_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED
    # the charge was not made again: the re-run got the first run's recorded receipt
    assert await redis_client.lrange(calls, 0, -1) == [f"{old_id}:charge:1"]
    assert done.output == {
        "receipt": {"charged_by_run": old_id, "key": f"{old_id}:charge:1"},
        "run_id": new_id,
    }
    new_events = await run_store.read_events(new_id)
    assert {"phase": "replayed", "key": f"{old_id}:charge:1"}.items() <= next(
        e.data for e in new_events if e.type == "effect"
    ).items()
    # the old run's stream still ends with its one terminal event; both runs link
    old_events = await run_store.read_events(old_id)
    assert old_events[-1].type == "failed"
    assert [e.type for e in old_events if e.type in TERMINAL_EVENT_TYPES] == ["failed"]
    assert (await run_store.get(old_id)).retried_by == new_id
    assert done.retry_of == old_id
