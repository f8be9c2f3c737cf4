"""Flow control over HTTP: limits declared and shown, priorities changed, singletons refused."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.leases.store import LeaseStore
from app.store.runs.store import RunStore

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


async def test_limits_are_replaced_whole_and_read_back(api: httpx.AsyncClient) -> None:
    assert (await api.get("/queues/default/limits")).json() == {
        "queue": None,
        "handlers": {},
        "default_key": None,
        "keys": {},
    }
    limits = {"queue": 8, "handlers": {"demo.echo": 2}, "default_key": 1, "keys": {"vip": 4}}
    response = await api.put("/queues/default/limits", json=limits)
    assert response.status_code == 200, response.text
    assert (await api.get("/queues/default/limits")).json() == limits
    await api.put("/queues/default/limits", json={"default_key": 3})
    assert (await api.get("/queues/default/limits")).json()["handlers"] == {}


async def test_hostile_limits_are_422_and_change_nothing(
    api: httpx.AsyncClient, settings: Settings, redis_client: aioredis.Redis
) -> None:
    await api.put("/queues/default/limits", json={"default_key": 2})
    hostile: list[object] = [
        {"queue": 0},
        {"queue": -1},
        {"queue": 1.5},
        {"queue": "3"},
        {"queue": 10**12},
        {"default_key": True},
        {"handlers": {"bad|name": 1}},
        {"handlers": {"demo.echo": 0}},
        {"keys": {"x" * 500: 1}},
        {"keys": {"k\n": 1}},
        '{"keys": {"k": 1e400}}',
        '{"queue": NaN}',
        {"keys": {f"k{i}": 1 for i in range(settings.max_limits + 1)}},
        {"unknown": 1},
        [],
    ]
    for body in hostile:
        if isinstance(body, str):
            headers = {"content-type": "application/json"}
            response = await api.put("/queues/default/limits", content=body, headers=headers)
        else:
            response = await api.put("/queues/default/limits", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get("/queues/default/limits")).json()["default_key"] == 2
    assert (await api.put("/queues/nowhere/limits", json={})).status_code == 404


async def test_a_limit_for_a_handler_nobody_registered_is_422_and_changes_nothing(
    api: httpx.AsyncClient, settings: Settings, redis_client: aioredis.Redis
) -> None:
    from tests.support.snapshots import changes, snapshot

    await api.put("/queues/default/limits", json={"handlers": {"demo.echo": 2}})
    before = await snapshot(redis_client, settings.prefix)
    for handlers in ({"demo.ecko": 1}, {"demo.echo": 3, "made.up": 1}):
        response = await api.put("/queues/default/limits", json={"handlers": handlers})
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"].endswith("/unknown-handler")
        assert (
            "'demo.ecko'" in response.json()["detail"] or "'made.up'" in response.json()["detail"]
        )
    assert not changes(before, await snapshot(redis_client, settings.prefix))
    assert (await api.get("/queues/default/limits")).json()["handlers"] == {"demo.echo": 2}


async def test_get_queue_shows_slots_per_key_and_what_waits(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    await api.put("/queues/default/limits", json={"default_key": 1, "handlers": {"demo.echo": 5}})
    for key in ("a", "a", "a", "b"):
        created = await api.post("/runs", json={**ECHO, "concurrency_key": key})
        assert created.status_code == 201
        assert created.json()["concurrency_key"] == key
    await lease_store.claim("default", "w-1", 10)
    flow = (await api.get("/queues/default")).json()["flow"]
    assert flow["keys"][0] == {"key": "a", "running": 1, "queued": 2, "limit": 1}
    assert {"key": "b", "running": 1, "queued": 0, "limit": 1} in flow["keys"]
    assert flow["handlers"] == [{"handler": "demo.echo", "running": 2, "limit": 5}]
    assert flow["blocked"] == 1
    metrics = (await api.get("/metrics")).text
    assert (
        'leasehold_concurrency_slots_used{name="demo.echo",queue="default",scope="handler"} 2.0'
        in metrics
    )
    assert 'leasehold_concurrency_slots_used{name="",queue="default",scope="keys"} 2.0' in metrics
    assert "leasehold_concurrency_resources_waited_on" in metrics


async def test_a_queued_runs_priority_changes_and_a_started_ones_does_not(
    api: httpx.AsyncClient, lease_store: LeaseStore, run_store: RunStore
) -> None:
    first = (await api.post("/runs", json=ECHO)).json()["id"]
    second = (await api.post("/runs", json=ECHO)).json()["id"]
    response = await api.patch(f"/runs/{second}", json={"priority": 50})
    assert response.status_code == 200 and response.json()["priority"] == 50
    claimed = (await lease_store.claim("default", "w-1", 1)).runs
    assert [run.id for run in claimed] == [second]
    conflict = await api.patch(f"/runs/{second}", json={"priority": 1})
    assert conflict.status_code == 409
    for body in ({"priority": 101}, {"priority": "1"}, {"priority": 1.5}, {}, {"status": "x"}):
        assert (await api.patch(f"/runs/{first}", json=body)).status_code == 422, body
    assert (await api.get(f"/runs/{first}")).json()["priority"] == 0
    events = await run_store.read_events(second)
    assert [(e.type, e.data) for e in events if e.type == "priority_changed"] == [
        ("priority_changed", {"from": 0, "to": 50})
    ]


async def test_create_refuses_hostile_flow_options(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    hostile = [
        {"priority": 1000},
        {"priority": True},
        {"concurrency_key": "a|b"},
        {"concurrency_key": ""},
        {"singleton_key": "x" * 129},
        {"singleton_key": "s", "on_conflict": "explode"},
    ]
    for extra in hostile:
        response = await api.post("/runs", json={**ECHO, **extra})
        assert response.status_code == 422, (extra, response.text)
    assert await redis_client.get(QueueKeys(prefix, "default").queued) is None


async def test_singleton_reject_is_a_409_naming_the_active_run(api: httpx.AsyncClient) -> None:
    body = {**ECHO, "singleton_key": "thread-7", "on_conflict": "reject"}
    first = (await api.post("/runs", json=body)).json()["id"]
    refused = await api.post("/runs", json=body)
    assert refused.status_code == 409
    problem = refused.json()
    assert problem["type"].endswith("/singleton-conflict")
    assert problem["run_id"] == first and problem["singleton_key"] == "thread-7"
    assert first in problem["detail"]


async def test_a_re_run_keeps_its_key_and_priority(api: httpx.AsyncClient) -> None:
    body = {**ECHO, "concurrency_key": "tenant-9", "priority": 5}
    ended = (await api.post("/runs", json=body)).json()["id"]
    assert (await api.post(f"/runs/{ended}/cancel")).status_code == 202
    again = await api.post(f"/runs/{ended}/retry")
    assert again.status_code in (200, 201), again.text
    rerun = again.json()
    assert (rerun["concurrency_key"], rerun["priority"]) == ("tenant-9", 5)
