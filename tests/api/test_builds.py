"""GET /builds, POST /runs/{id}/upgrade and POST /builds/{id}/upgrade through the API,
against a real Redis: what a build holds, drained, and every bad request refused with
nothing written (issue 36)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import WorkerInfo
from app.settings import Settings
from app.store.leases import workers
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Scripts
from app.store.progress.store import ProgressStore
from tests.api.conftest import BOOTSTRAP

Q = "default"


async def advertise(
    client: aioredis.Redis, prefix: str, build: str, draining: bool = False
) -> None:
    now = datetime.now(tz=UTC)
    info = WorkerInfo(
        id=f"w-{build}",
        host="h",
        pid=1,
        queues=[Q],
        concurrency=4,
        running=1,
        loop_lag_ms=0.0,
        started_at=now,
        last_heartbeat_at=now,
        build_id=build,
        draining=draining,
    )
    pipe = client.pipeline(transaction=False)
    workers.advertise(pipe, prefix, info, 30_000)
    await pipe.execute()


async def pinned_runs(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    build: str,
    count: int = 1,
) -> list[str]:
    """Pinned runs, claimed once by ``build`` and handed back: queued in its lanes."""
    body = {"handler": "demo.echo", "input": {}, "versioning": "pinned"}
    ids = []
    for _ in range(count):
        created = await api.post("/runs", json=body)
        assert created.status_code == 201, created.text
        ids.append(str(created.json()["id"]))
    store = LeaseStore.for_settings(redis_client, Scripts(), settings)
    store.build_id = build
    claim = await store.claim(Q, f"w-{build}", count)
    assert sorted(run.lease.run_id for run in claim.runs) == sorted(ids)
    await store.release([run.lease for run in claim.runs], "drain")
    return ids


async def pinned_run(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings, build: str
) -> str:
    (run_id,) = await pinned_runs(api, redis_client, settings, build)
    return run_id


async def test_a_build_holds_its_pinned_runs_until_they_are_upgraded(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, settings: Settings
) -> None:
    run_id = await pinned_run(api, redis_client, settings, "v1")
    await advertise(redis_client, prefix, "v2")
    listed = {b["build_id"]: b for b in (await api.get("/builds")).json()}
    assert set(listed) == {"v1", "v2"}
    v1 = listed["v1"]
    assert v1["drained"] is False and v1["workers"] == []
    assert v1["pinned"] == {"queued": 1, "running": 0, "parked": 0, "estimated": False}
    assert v1["unavailable"] == 1  # queued, and no live worker runs v1
    assert listed["v2"]["drained"] is True and listed["v2"]["workers"] == ["w-v2"]
    queue = (await api.get(f"/queues/{Q}")).json()
    assert queue["build_unavailable"] == {"v1": 1}
    scraped = (await api.get("/metrics")).text
    assert 'leasehold_build_runs{build="v1",state="unavailable"} 1.0' in scraped
    assert 'leasehold_build_workers{build="v2"} 1.0' in scraped

    moved = await api.post(f"/runs/{run_id}/upgrade", json={"build_id": "v2"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["pinned_build"] == "v2" and moved.json()["versioning"] == "pinned"
    assert (await api.get("/builds/v1")).json()["drained"] is True
    assert (await api.get(f"/queues/{Q}")).json()["build_unavailable"] == {}


async def test_bulk_upgrade_moves_the_build_runs_by_filter_and_says_what_is_left(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    ids = await pinned_runs(api, redis_client, settings, "v1", 3)
    other = await api.post(
        "/builds/v1/upgrade", json={"handler": "demo.sleep", "to_build_id": "v2"}
    )
    assert other.json() == {"build_id": "v1", "upgraded": 0, "remaining": 3}
    some = await api.post("/builds/v1/upgrade", json={"limit": 2})
    assert some.json() == {"build_id": "v1", "upgraded": 2, "remaining": 1}
    rest = await api.post("/builds/v1/upgrade", json={"handler": "demo.echo"})
    assert rest.json() == {"build_id": "v1", "upgraded": 1, "remaining": 0}
    for run_id in ids:
        run = (await api.get(f"/runs/{run_id}")).json()
        assert run["pinned_build"] is None and run["status"] == "queued"


async def test_upgrading_what_is_not_pinned_is_409_and_unknown_is_404(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    pinned = await pinned_run(api, redis_client, settings, "v1")
    plain = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()["id"]
    refused = await api.post(f"/runs/{plain}/upgrade")
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "pinned to no build" in refused.json()["detail"]
    same = await api.post(f"/runs/{pinned}/upgrade", json={"build_id": "v1"})
    assert same.status_code == 409
    unknown = await api.post(f"/runs/{Q}.01JDZ000000000000000000009/upgrade")
    assert unknown.status_code == 404
    history = (await api.get(f"/runs/{pinned}/history")).json()
    assert [e["type"] for e in history["events"] if e["type"] == "upgraded"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"build_id": ""},
        {"build_id": "x" * 65},
        {"build_id": "bäd"},
        {"build_id": "a b"},
        {"build_id": 7},
        {"nope": 1},
        [],
    ],
)
async def test_a_bad_upgrade_body_is_422_and_moves_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings, body: object
) -> None:
    pinned = await pinned_run(api, redis_client, settings, "v1")
    response = await api.post(f"/runs/{pinned}/upgrade", json=body)
    assert response.status_code == 422, response.text
    assert (await api.get(f"/runs/{pinned}")).json()["pinned_build"] == "v1"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/builds/%20/upgrade", "{}"),
        ("/builds/" + "x" * 65 + "/upgrade", "{}"),
        ("/builds/v1/upgrade", '{"limit": 0}'),
        ("/builds/v1/upgrade", '{"limit": 10001}'),
        ("/builds/v1/upgrade", '{"limit": 1e400}'),
        ("/builds/v1/upgrade", '{"limit": NaN}'),
        ("/builds/v1/upgrade", '{"queue": "../x"}'),
        ("/builds/v1/upgrade", '{"handler": "' + "h" * 200 + '"}'),
        ("/builds/v1/upgrade", '{"to_build_id": "\\u00e9"}'),
        ("/builds/v1/upgrade", "[" * 5000),
    ],
)
async def test_a_bad_bulk_upgrade_is_4xx_and_moves_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    path: str,
    body: str,
) -> None:
    pinned = await pinned_run(api, redis_client, settings, "v1")
    response = await api.post(path, content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert (await api.get(f"/runs/{pinned}")).json()["pinned_build"] == "v1"


@pytest.mark.parametrize("build_id", ["x" * 65, "bad build", "ü"])
async def test_a_malformed_build_id_is_422(api: httpx.AsyncClient, build_id: str) -> None:
    assert (await api.get(f"/builds/{build_id}")).status_code == 422


async def test_a_build_nobody_knows_is_drained_and_empty(api: httpx.AsyncClient) -> None:
    nobody = (await api.get("/builds/never-deployed")).json()
    assert nobody["drained"] is True and nobody["workers"] == []
    assert nobody["pinned"]["queued"] == 0


async def test_a_run_option_naming_an_unknown_versioning_is_422(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/runs", json={"handler": "demo.echo", "input": {}, "versioning": "sometimes"}
    )
    assert response.status_code == 422


async def test_upgrade_and_retry_resolves_a_drifted_pinned_run_onto_any_build(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """A pinned run that drifted on its build: resolve {retry, upgrade} unpins it first."""
    pinned = await pinned_run(api, redis_client, settings, "v1")
    v1 = LeaseStore.for_settings(redis_client, Scripts(), settings)
    v1.build_id = "v1"
    (claimed,) = (await v1.claim(Q, "w-v1", 1)).runs
    details = '{"position":0,"recorded":"e|a:1","taken":"e|b:1"}'
    await ProgressStore.for_settings(redis_client, Scripts(), settings).report_drift(
        claimed.lease, details
    )
    refused = await api.post(f"/runs/{pinned}/resolve", json={"action": "fail", "upgrade": True})
    assert refused.status_code == 422
    resolved = await api.post(f"/runs/{pinned}/resolve", json={"action": "retry", "upgrade": True})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["status"] == "queued" and resolved.json()["pinned_build"] is None
    v2 = LeaseStore.for_settings(redis_client, Scripts(), settings)
    v2.build_id = "v2"
    (taken,) = (await v2.claim(Q, "w-v2", 1)).runs
    assert taken.lease.run_id == pinned
    assert (await api.get(f"/runs/{pinned}")).json()["pinned_build"] == "v2"


async def test_a_submit_key_may_retry_but_not_upgrade(keyed_api: httpx.AsyncClient) -> None:
    admin = {"Authorization": f"Bearer {BOOTSTRAP}"}
    made = await keyed_api.post("/keys", json={"name": "app", "role": "submit"}, headers=admin)
    submit = {"Authorization": f"Bearer {made.json()['secret']}"}
    run_id = f"{Q}.01JDZ000000000000000000009"
    body = {"action": "retry", "upgrade": True}
    refused = await keyed_api.post(f"/runs/{run_id}/resolve", json=body, headers=submit)
    assert refused.status_code == 403
    assert "operate" in refused.json()["detail"]
    upgrade = await keyed_api.post(f"/runs/{run_id}/upgrade", headers=submit)
    assert upgrade.status_code == 403
