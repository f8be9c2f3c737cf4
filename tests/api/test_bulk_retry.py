"""POST /runs/retry: a bulk retry by filter as a tracked operation (GET /operations/{id}).

Hostile input first; then a real filter over runs that ended in several ways, in small
steps so the progress is seen moving; then stalls, resumes and cancels.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.models.read import RetryFilter
from app.settings import Settings
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.operations.store import OperationStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.snapshots import changes, snapshot

BATCH = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Small steps, so an operation over a dozen runs takes several."""
    return settings.model_copy(
        update={
            "retry_batch_size": BATCH,
            "retry_operation_max_runs": 50,
            "retry_operations_max": 2,
        }
    )


async def ended(
    run_store: RunStore,
    lease_store: LeaseStore,
    *,
    handler: str,
    code: str,
    status: str = "failed",
) -> str:
    run_id = (await run_store.create(NewRun(handler=handler, input={}))).run.id
    claimed = (await lease_store.claim("default", "w-1", 1)).runs[0]
    assert claimed.id == run_id
    error = f'{{"code":"{code}","message":"m","retryable":false,"details":{{}}}}'
    await lease_store.finish_and_claim(
        "default", "w-1", [Outcome(claimed.lease, RunStatus(status), error_json=error)], 0
    )
    return run_id


async def past_the_millisecond_of(
    redis_client: aioredis.Redis, run_store: RunStore, run_id: str
) -> None:
    """Wait until Redis' clock is past the millisecond ``run_id`` was created in.

    An operation looks only at runs created before the millisecond it starts in (so that its
    own re-runs are never matched); on a fast machine a run created just before it can share
    that millisecond and is then, by design, not matched.
    """
    created_ms = int((await run_store.get(run_id)).created_at.timestamp() * 1000)

    async def now_ms() -> int:
        seconds, micros = await redis_client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    await eventually(now_ms, until=lambda now: now > created_ms)


async def finished(api: httpx.AsyncClient, location: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        body: dict[str, Any] = (await api.get(location)).json()
        return body

    return await eventually(read, until=lambda op: op["status"] in ("done", "cancelled"))


NOW = datetime.now(tz=UTC)


@pytest.mark.parametrize(
    "body",
    [
        {"limit": 51},
        {"limit": 0},
        {"limit": "5"},
        {"status": ["succeeded"]},
        {"status": ["running"]},
        {"status": []},
        {"status": ["failed"] * 5},
        {"status": ["failed", "failed"]},
        {"error_code": "x" * 129},
        {"error_code": "no spaces"},
        {"handler": "h" * 200},
        {"queue": "q" * 65},
        {"finished_after": NOW.isoformat(), "finished_before": NOW.isoformat()},
        {
            "finished_after": NOW.isoformat(),
            "finished_before": (NOW - timedelta(days=1)).isoformat(),
        },
        {"finished_after": "2026-01-01T00:00:00"},  # no zone
        {"finished_before": "yesterday"},
        {"finished_before": "99999-01-01T00:00:00Z"},
        {"checkpoint": "sometimes"},
        {"everything": True},
        {"queue": "never-declared"},
    ],
)
async def test_a_hostile_filter_is_a_422_and_writes_nothing(
    body: dict[str, Any], api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    before = await snapshot(redis_client, settings.prefix)
    response = await api.post("/runs/retry", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert not changes(before, await snapshot(redis_client, settings.prefix))


async def test_unknown_and_malformed_operation_ids(api: httpx.AsyncClient) -> None:
    unknown = await api.get("/operations/01J00000000000000000000000")
    assert unknown.status_code == 404
    assert unknown.json()["type"].endswith("operation-not-found")
    assert (await api.get("/operations/not-an-id")).status_code == 422
    assert (await api.post("/operations/01J00000000000000000000000/resume")).status_code == 404
    assert (await api.post("/operations/01J00000000000000000000000/cancel")).status_code == 404


async def test_a_bulk_retry_re_runs_exactly_what_the_filter_matches_in_saved_steps(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    wanted = [
        await ended(run_store, lease_store, handler="demo.echo", code="upstream_down")
        for _ in range(7)
    ]
    others = [
        await ended(run_store, lease_store, handler="demo.echo", code="bad_input"),
        await ended(run_store, lease_store, handler="demo.sleep", code="upstream_down"),
        await ended(
            run_store, lease_store, handler="demo.echo", code="upstream_down", status="succeeded"
        ),
    ]
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    response = await api.post(
        "/runs/retry", json={"handler": "demo.echo", "error_code": "upstream_down"}
    )
    assert response.status_code == 202, response.text
    location = response.headers["location"]
    assert location == f"/operations/{response.json()['id']}"
    op = await finished(api, location)
    assert op["status"] == "done"
    assert (op["matched"], op["retried"], op["skipped"], op["errors"]) == (7, 7, 0, 0)
    assert op["steps"] >= 7 // BATCH, "progress was saved step by step"
    assert op["filter"]["error_code"] == "upstream_down"
    assert op["finished_at"] is not None
    assert {pair["run_id"] for pair in op["recent"]} == set(wanted)
    for run_id in wanted:
        old = await run_store.get(run_id)
        assert old.retried_by is not None
        assert (await run_store.get(old.retried_by)).retry_of == run_id
    for run_id in [*others, queued]:
        assert (await run_store.get(run_id)).retried_by is None
    # the same filter again re-runs nothing: every match is re-run already
    again = await finished(
        api,
        (
            await api.post(
                "/runs/retry", json={"handler": "demo.echo", "error_code": "upstream_down"}
            )
        ).headers["location"],
    )
    assert (again["matched"], again["retried"], again["skipped"]) == (7, 0, 7)


async def test_limit_and_time_range_bound_what_is_re_run(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    for _ in range(4):
        await ended(run_store, lease_store, handler="demo.echo", code="e")
    capped = await finished(
        api, (await api.post("/runs/retry", json={"limit": 2})).headers["location"]
    )
    assert (capped["status"], capped["retried"], capped["limit"]) == ("done", 2, 2)
    future = (datetime.now(tz=UTC) + timedelta(days=1)).isoformat()
    none = await finished(
        api, (await api.post("/runs/retry", json={"finished_after": future})).headers["location"]
    )
    assert (none["matched"], none["retried"]) == (0, 0)


async def test_a_stalled_operation_is_resumed_and_a_cancelled_one_is_not(
    api: httpx.AsyncClient,
    run_store: RunStore,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    scripts: Scripts,
    settings: Settings,
) -> None:
    """An operation whose process died (a record nobody drives) shows stalled; resume ends it."""
    failed = [await ended(run_store, lease_store, handler="demo.echo", code="e") for _ in range(4)]
    await past_the_millisecond_of(redis_client, run_store, failed[-1])
    operations = OperationStore(
        redis_client, scripts=scripts, prefix=settings.prefix, retention_ms=60_000
    )
    orphan = await operations.create(RetryFilter(), limit=50)
    assert (await api.get(f"/operations/{orphan.operation_id}")).json()["status"] == "stalled"
    resumed = await api.post(f"/operations/{orphan.operation_id}/resume")
    assert resumed.status_code == 202
    op = await finished(api, f"/operations/{orphan.operation_id}")
    assert (op["status"], op["retried"]) == ("done", 4)
    assert all([(await run_store.get(run_id)).retried_by for run_id in failed])
    again = await api.post(f"/operations/{orphan.operation_id}/resume")
    assert again.status_code == 409 and "done" in again.json()["detail"]

    cancelled = await operations.create(RetryFilter(), limit=50)
    response = await api.post(f"/operations/{cancelled.operation_id}/cancel")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert (await api.post(f"/operations/{cancelled.operation_id}/resume")).status_code == 409
    assert (await api.post(f"/operations/{cancelled.operation_id}/cancel")).status_code == 409


async def test_past_the_process_cap_a_bulk_retry_is_a_503_with_retry_after(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    drivers = api._transport.app.state.leasehold.retries  # type: ignore[attr-defined]
    drivers.running.update({"a": None, "b": None})  # two in flight: the cap of this test
    try:
        before = await snapshot(redis_client, settings.prefix)
        response = await api.post("/runs/retry", json={})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        assert not changes(before, await snapshot(redis_client, settings.prefix))
    finally:
        drivers.running.clear()
