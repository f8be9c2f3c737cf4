"""Declared queues: runs only on them, PUT /queues bounded, GET /queues counts what they hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.models import RunStatus
from app.settings import Settings
from app.store.keys import GlobalKeys
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import WaitCall, WaitKind, WaitStore

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


@pytest.fixture
async def small_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An API that may declare at most 3 queues besides its configured ones."""
    app = create_app(settings.model_copy(update={"queues": ["default", "mail"], "max_queues": 3}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def declared(redis_client: aioredis.Redis, prefix: str) -> set[str]:
    return set(await redis_client.smembers(GlobalKeys(prefix).queues))


async def test_a_run_on_an_undeclared_queue_is_422_naming_the_declared_ones(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    response = await api.post("/runs", json={**ECHO, "queue": "invented"})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"].endswith("queue-not-declared")
    assert "'invented'" in problem["detail"] and "declared: default" in problem["detail"]
    assert await redis_client.keys(f"{prefix}:{{invented}}*") == []


async def test_300_attempts_to_invent_queues_leave_the_declared_set_unchanged(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    assert (await api.post("/runs", json=ECHO)).status_code == 201
    before = await declared(redis_client, prefix)
    assert before == {"default"}
    statuses = set()
    # three times LEASEHOLD_MAX_QUEUES (100): past any cap a leak could hide under; each
    # name is refused by the same read (the set is never cached), so 1,500 proved no more
    for batch in range(3):
        responses = await asyncio.gather(
            *(api.post("/runs", json={**ECHO, "queue": f"q{batch}-{i}"}) for i in range(100))
        )
        statuses.update(response.status_code for response in responses)
    assert statuses == {422}
    assert await declared(redis_client, prefix) == before
    listed = (await api.get("/runs", params={"queue": "q3-7"})).json()
    assert listed["items"] == []
    assert (await api.get("/queues")).json()["items"][0]["name"] == "default"
    assert await declared(redis_client, prefix) == before


async def test_put_declares_a_queue_once_and_runs_may_then_be_created_on_it(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    first = await api.put("/queues/mail")
    assert first.status_code == 201
    assert first.headers["location"] == "/queues/mail"
    assert first.json()["name"] == "mail" and first.json()["configured"] is False
    assert (await api.put("/queues/mail")).status_code == 200
    assert await declared(redis_client, prefix) == {"default", "mail"}
    created = await api.post("/runs", json={**ECHO, "queue": "mail"})
    assert created.status_code == 201
    names = [item["name"] for item in (await api.get("/queues")).json()["items"]]
    assert names == ["default", "mail"]


@pytest.mark.parametrize(
    "name", ["has space", "a" * 65, "{tag}", "x:y", "%00", "ünï"], ids=lambda n: n[:8]
)
async def test_a_malformed_queue_name_is_422_and_declares_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, name: str
) -> None:
    response = await api.put(f"/queues/{name}")
    assert response.status_code in (404, 422)
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get(f"/queues/{name}")).status_code in (404, 422)
    assert await declared(redis_client, prefix) <= {"default"}


async def test_put_past_max_queues_is_409_and_changes_nothing(
    small_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    # default and mail are configured: configuration is never refused, and counts
    assert (await small_api.put("/queues/third")).status_code == 201
    responses = await asyncio.gather(*(small_api.put(f"/queues/extra{i}") for i in range(50)))
    assert {response.status_code for response in responses} == {409}
    problem = responses[0].json()
    assert problem["type"].endswith("queue-limit-reached")
    assert await declared(redis_client, prefix) == {"default", "mail", "third"}
    # declaring a declared queue is still fine when the set is full
    assert (await small_api.put("/queues/mail")).status_code == 200
    assert (await small_api.get("/queues")).json()["max_queues"] == 3


async def test_concurrent_declarations_never_pass_the_bound(
    small_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    responses = await asyncio.gather(*(small_api.put(f"/queues/race{i}") for i in range(40)))
    assert sorted(response.status_code for response in responses).count(201) == 1
    assert len(await declared(redis_client, prefix)) == 3


async def test_an_undeclared_queue_is_404(api: httpx.AsyncClient) -> None:
    response = await api.get("/queues/nobody")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_get_queue_counts_ready_running_delayed_and_parked_runs(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = [
        (await api.post("/runs", json={**ECHO, "max_attempts": 3})).json()["id"] for _ in range(5)
    ]
    claimed = (await lease_store.claim("default", "w-a", 3)).runs
    assert len(claimed) == 3
    retried, parked, _running = claimed
    await lease_store.finish_and_claim(
        "default",
        "w-a",
        [
            Outcome(
                retried.lease,
                RunStatus.FAILED,
                error_json='{"code":"x","message":"x","retryable":true}',
                retry_delay_ms=60_000,
            ),
            Outcome(parked.lease, RunStatus.WAITING_HUMAN, output_json='{"reason":"r"}'),
        ],
        0,
    )
    assert (await run_store.get(ids[0])).status == "queued"  # retried: waiting its turn
    info = (await api.get("/queues/default")).json()
    assert {key: info[key] for key in ("ready", "running", "delayed", "parked")} == {
        "ready": 2,
        "running": 1,
        "delayed": 1,
        "parked": 1,
    }
    assert info["configured"] is True
    assert info["oldest_queued_age_s"] >= 0
    assert info["memory_bytes"] > 0
    # resuming takes it out of the parked count; cancelling a parked run does too
    assert (await api.post(f"/runs/{parked.id}/resume", json={"input": 1})).status_code == 202
    assert (await api.get("/queues/default")).json()["parked"] == 0


async def test_metrics_and_listing_read_only_declared_queues(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    # a run written on a queue nobody declared (an older version could): not listed
    await run_store.create(NewRun(handler="demo.echo", input={}, queue="ghost"))
    assert (await api.post("/runs", json=ECHO)).status_code == 201
    items = (await api.get("/runs")).json()["items"]
    assert [item["queue"] for item in items] == ["default"]
    metrics = (await api.get("/metrics")).text
    assert 'queue="default"' in metrics and 'queue="ghost"' not in metrics
    assert 'leasehold_queue_depth{queue="default",state="parked"} 0.0' in metrics


async def test_a_parked_run_leaves_the_parked_count_when_cancelled(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    run_id = (await api.post("/runs", json=ECHO)).json()["id"]
    held = (await lease_store.claim("default", "w-a", 1)).runs[0]
    escalation = Outcome(held.lease, RunStatus.WAITING_HUMAN, output_json='{"reason":"r"}')
    await lease_store.finish_and_claim("default", "w-a", [escalation], 0)
    assert (await api.get("/queues/default")).json()["parked"] == 1
    assert (await api.post(f"/runs/{run_id}/cancel")).json()["status"] == "cancelled"
    info = (await api.get("/queues/default")).json()
    assert (info["parked"], info["ready"], info["running"]) == (0, 0, 0)


async def test_an_empty_declared_queue_is_undeclared_204_and_gone_from_the_listing(
    small_api: httpx.AsyncClient,
) -> None:
    assert (await small_api.put("/queues/spare")).status_code == 201
    response = await small_api.delete("/queues/spare")
    assert response.status_code == 204
    names = [queue["name"] for queue in (await small_api.get("/queues")).json()["items"]]
    assert "spare" not in names
    assert (await small_api.get("/queues/spare")).status_code == 404
    refused = await small_api.post("/runs", json={**ECHO, "queue": "spare"})
    assert refused.status_code == 422  # no process still trusts a stale "declared"


async def test_a_queue_holding_a_run_is_409_saying_what_it_holds_and_stays_declared(
    small_api: httpx.AsyncClient,
) -> None:
    assert (await small_api.put("/queues/busy")).status_code == 201
    assert (await small_api.post("/runs", json={**ECHO, "queue": "busy"})).status_code == 201
    response = await small_api.delete("/queues/busy")
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"].endswith("queue-not-empty")
    assert "1 ready" in problem["detail"] and "1 stored" in problem["detail"]
    assert (await small_api.get("/queues/busy")).status_code == 200


async def test_a_configured_queue_is_409_it_would_come_back_at_start(
    small_api: httpx.AsyncClient,
) -> None:
    response = await small_api.delete("/queues/mail")
    assert response.status_code == 409
    assert "LEASEHOLD_QUEUES" in response.json()["detail"]
    assert (await small_api.get("/queues/mail")).status_code == 200


async def test_undeclaring_unknown_is_404_and_malformed_is_422(
    small_api: httpx.AsyncClient,
) -> None:
    unknown = await small_api.delete("/queues/nobody")
    assert unknown.status_code == 404
    assert unknown.json()["type"] != "about:blank"
    assert (await small_api.delete("/queues/bad%20name")).status_code == 422
    assert (await small_api.delete("/queues/" + "x" * 65)).status_code == 422


async def test_a_full_set_frees_a_slot_when_one_queue_is_undeclared(
    small_api: httpx.AsyncClient,
) -> None:
    statuses = [(await small_api.put(f"/queues/a{i}")).status_code for i in range(5)]
    assert statuses[-1] == 409 and 201 in statuses  # the set is full
    full = statuses.index(409)
    assert (await small_api.delete("/queues/a0")).status_code == 204
    assert (await small_api.put(f"/queues/a{full}")).status_code == 201


async def test_a_create_that_loses_the_race_with_an_undeclare_declares_its_queue_again(
    small_api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    """The create checked the queue, an undeclare removed it, then the run was written."""
    assert (await small_api.put("/queues/racy")).status_code == 201
    app = small_api._transport.app  # type: ignore[attr-defined]
    state = app.state.leasehold
    real_create = state.store.create

    async def create_after_undeclare(new: NewRun) -> object:
        assert (await small_api.delete("/queues/racy")).status_code == 204
        return await real_create(new)

    state.store.create = create_after_undeclare
    try:
        assert (await small_api.post("/runs", json={**ECHO, "queue": "racy"})).status_code == 201
    finally:
        state.store.create = real_create
    assert "racy" in await declared(redis_client, prefix)
    assert (await small_api.delete("/queues/racy")).status_code == 409


async def test_durable_waits_count_as_waiting_apart_from_retry_backoff_in_queues_and_metrics(
    api: httpx.AsyncClient,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    waits = WaitStore.for_settings(redis_client, Scripts(), settings)
    for _ in range(3):
        assert (await api.post("/runs", json={**ECHO, "max_attempts": 3})).status_code == 201
    retried, sleeping, signalled = (await lease_store.claim("default", "w-a", 3)).runs
    failure = '{"code":"x","message":"x","retryable":true}'
    backoff = Outcome(retried.lease, RunStatus.FAILED, error_json=failure, retry_delay_ms=60_000)
    await lease_store.finish_and_claim("default", "w-a", [backoff], 0)
    nap = WaitCall(sleeping.id, WaitKind.SLEEP, "nap", 1, duration_ms=60_000)
    await waits.park(sleeping.lease, nap)
    await waits.park(signalled.lease, WaitCall(signalled.id, WaitKind.SIGNAL, "go", 1))
    info = (await api.get("/queues/default")).json()
    assert (info["delayed"], info["waiting"], info["ready"], info["running"]) == (1, 2, 0, 0)
    listed = (await api.get("/queues")).json()["items"]
    assert [(q["delayed"], q["waiting"]) for q in listed if q["name"] == "default"] == [(1, 2)]
    metrics = (await api.get("/metrics")).text
    assert 'leasehold_queue_depth{queue="default",state="waiting"} 2.0' in metrics
    assert 'leasehold_queue_depth{queue="default",state="delayed"} 1.0' in metrics
