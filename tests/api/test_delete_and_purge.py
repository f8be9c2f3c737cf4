"""DELETE /runs/{id} and POST /runs/purge against a real redis-server (and a real worker)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.leases.store import LeaseStore, Outcome
from app.store.runs.store import RunStore
from app.telemetry.metrics import API_REGISTRY
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

OWNER = "w-purge"


async def create(api: httpx.AsyncClient, handler: str = "demo.echo", **body: object) -> str:
    response = await api.post("/runs", json={"handler": handler, **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def finish(lease_store: LeaseStore, queue: str, outcome: str, count: int = 1) -> list[str]:
    """Claim ``count`` runs of ``queue`` and end them with ``outcome``."""
    claim = await lease_store.claim(queue, OWNER, count)
    outcomes = [
        Outcome(
            run.lease,
            RunStatus(outcome),
            error_json='{"code":"x","message":"x"}' if outcome == "failed" else "",
        )
        for run in claim.runs
    ]
    await lease_store.finish_and_claim(queue, OWNER, outcomes, 0)
    return [run.id for run in claim.runs]


def deleted_count(via: str) -> float:
    """This process's leasehold_runs_deleted_total for the default queue (the API runs here)."""
    value = API_REGISTRY.get_sample_value(
        "leasehold_runs_deleted_total", {"queue": "default", "via": via}
    )
    return value or 0.0


async def keys_left(client: aioredis.Redis, settings: Settings, run_id: str, idem: str) -> dict:  # type: ignore[type-arg]
    """Which of the run's keys and index entries still exist."""
    keys = QueueKeys(settings.prefix, run_id.rsplit(".", 1)[0])
    return {
        "record": await client.exists(keys.run(run_id)),
        "events": await client.exists(keys.events(run_id)),
        "effects": await client.exists(keys.effects(run_id)),
        "idem": await client.exists(keys.idem(idem)),
        "listed": await client.zscore(keys.runs, run_id) is not None,
        "unclaimed": await client.zscore(keys.unclaimed, run_id) is not None,
    }


async def test_delete_removes_a_finished_run_and_every_key_of_it(
    api: httpx.AsyncClient,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    run_id = await create(api, idempotency_key="del-1")
    await redis_client.hset(QueueKeys(settings.prefix, "default").effects(run_id), "e:1", "{}")
    assert await finish(lease_store, "default", "succeeded") == [run_id]
    before = deleted_count("delete")
    response = await api.delete(f"/runs/{run_id}")
    assert response.status_code == 204
    assert deleted_count("delete") == before + 1
    assert (await api.get(f"/runs/{run_id}")).status_code == 404
    assert await keys_left(redis_client, settings, run_id, "del-1") == {
        "record": 0,
        "events": 0,
        "effects": 0,
        "idem": 0,
        "listed": False,
        "unclaimed": False,
    }
    again = await api.delete(f"/runs/{run_id}")
    assert again.status_code == 404
    assert again.headers["content-type"].startswith("application/problem+json")
    # the key went with its run: the same key now makes a new run
    assert await create(api, idempotency_key="del-1") != run_id


@pytest.mark.parametrize("claimed", [False, True], ids=["queued", "running"])
async def test_delete_refuses_a_run_that_has_not_finished(
    api: httpx.AsyncClient, lease_store: LeaseStore, run_store: RunStore, claimed: bool
) -> None:
    run_id = await create(api)
    if claimed:
        await lease_store.claim("default", OWNER, 1)
    response = await api.delete(f"/runs/{run_id}")
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    run = (await api.get(f"/runs/{run_id}")).json()
    assert run["status"] == ("running" if claimed else "queued")
    expected = ["created", "claimed"] if claimed else ["created"]
    assert [event.type for event in await run_store.read_events(run_id)] == expected


@pytest.mark.parametrize(
    ("path", "status"),
    [("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV", 404), ("/runs/nope", 422), ("/runs/a%3Ab", 422)],
)
async def test_delete_of_an_unknown_or_malformed_id_is_a_problem(
    api: httpx.AsyncClient, path: str, status: int
) -> None:
    response = await api.delete(path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    "body",
    [
        {"status": "running"},
        {"status": "queued"},
        {"status": "waiting_human"},
        {"status": "bogus"},
        {"queue": "no spaces"},
        {"queue": "x" * 65},
        {"handler": "a/b"},
        {"finished_before": "2026-01-01T00:00:00"},  # no zone: ambiguous
        {"finished_before": "yesterday"},
        {"limit": 0},
        {"limit": -1},
        {"limit": 10**30},
        {"limit": "10"},
        {"cursor": "x" * 300},
        {"surprise": 1},
        [],
        "purge",
    ],
)
async def test_a_bad_purge_is_refused_and_deletes_nothing(
    api: httpx.AsyncClient, lease_store: LeaseStore, body: object
) -> None:
    run_id = await create(api)
    await finish(lease_store, "default", "succeeded")
    response = await api.post("/runs/purge", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get(f"/runs/{run_id}")).status_code == 200


async def test_a_purge_past_the_batch_bound_is_refused(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    response = await api.post("/runs/purge", json={"limit": settings.purge_batch_max + 1})
    assert response.status_code == 422
    assert str(settings.purge_batch_max) in response.json()["detail"]
    assert (await api.post("/runs/purge", json={"limit": settings.purge_batch_max})).json()["done"]


async def test_a_purge_cursor_not_from_this_api_is_400(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/purge", json={"cursor": "not-a-cursor"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_purge_removes_exactly_the_matching_finished_runs(
    api: httpx.AsyncClient,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    for queue in ("mail", "other"):
        assert (await api.put(f"/queues/{queue}")).status_code == 201
    for index in range(3):
        await create(api, queue="mail", idempotency_key=f"mail-ok-{index}")
    mail_ok = await finish(lease_store, "mail", "succeeded", 3)
    await create(api, queue="mail")
    mail_failed = await finish(lease_store, "mail", "failed")
    await create(api, queue="other")
    other_ok = await finish(lease_store, "other", "succeeded")
    queued = await create(api, queue="mail")

    result = await api.post("/runs/purge", json={"queue": "mail", "status": "succeeded"})
    assert result.status_code == 200, result.text
    body = result.json()
    assert sorted(body["ids"]) == sorted(mail_ok)
    assert body["deleted"] == 3
    assert body["done"] is True and body["next_cursor"] is None
    for index, run_id in enumerate(sorted(mail_ok, key=mail_ok.index)):
        left = await keys_left(redis_client, settings, run_id, f"mail-ok-{index}")
        assert left == dict.fromkeys(left, 0) | {"listed": False, "unclaimed": False}
    for kept in [*mail_failed, *other_ok, queued]:
        assert (await api.get(f"/runs/{kept}")).status_code == 200
    again = (await api.post("/runs/purge", json={"queue": "mail", "status": "succeeded"})).json()
    assert again["deleted"] == 0  # safe to repeat

    # no status: every finished run of the queue, never the queued one
    rest = (await api.post("/runs/purge", json={"queue": "mail"})).json()
    assert rest["ids"] == mail_failed
    assert (await api.get(f"/runs/{queued}")).json()["status"] == "queued"


async def test_purge_by_handler_and_finish_time(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    await create(api, "demo.echo")
    echo = await finish(lease_store, "default", "succeeded")
    await create(api, "demo.sleep", input={"seconds": 1})
    sleep = await finish(lease_store, "default", "succeeded")
    earlier = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()

    none_yet = (await api.post("/runs/purge", json={"finished_before": earlier})).json()
    assert none_yet["deleted"] == 0
    by_handler = await api.post(
        "/runs/purge", json={"handler": "demo.sleep", "finished_before": later}
    )
    assert by_handler.json()["ids"] == sleep
    assert (await api.get(f"/runs/{echo[0]}")).status_code == 200


async def test_purge_works_in_bounded_batches_until_done(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    for _ in range(7):
        await create(api)
    finished = await finish(lease_store, "default", "succeeded", 7)
    deleted: list[str] = []
    cursor = None
    calls = 0
    before = deleted_count("purge")
    while True:
        body = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await api.post("/runs/purge", json=body)).json()
        calls += 1
        assert page["deleted"] <= 3
        deleted.extend(page["ids"])
        if page["done"]:
            break
        cursor = page["next_cursor"]
    assert sorted(deleted) == sorted(finished)
    assert deleted_count("purge") == before + 7
    assert calls >= 3
    assert (await api.get("/runs")).json()["items"] == []


async def test_purge_racing_a_live_worker_never_deletes_an_unfinished_run(
    api: httpx.AsyncClient, processes: Processes, run_store: RunStore
) -> None:
    sleepers = [await create(api, "demo.sleep", input={"seconds": 60}) for _ in range(2)]
    processes.worker("--concurrency", "4")
    for run_id in sleepers:
        await wait_status(run_store, run_id, RunStatus.RUNNING)
    echoes = [await create(api) for _ in range(30)]
    deleted: set[str] = set()

    async def purge_until_every_echo_is_gone() -> None:
        while not set(echoes) <= deleted:
            cursor = None
            while True:
                body = {"limit": 7} | ({"cursor": cursor} if cursor else {})
                page = (await api.post("/runs/purge", json=body)).json()
                deleted.update(page["ids"])
                if page["done"]:
                    break
                cursor = page["next_cursor"]
            await asyncio.sleep(0.02)

    await asyncio.wait_for(purge_until_every_echo_is_gone(), timeout=60)
    assert deleted == set(echoes)  # every echo, each deleted only once it had finished
    for run_id in sleepers:
        assert (await run_store.get(run_id)).status == RunStatus.RUNNING
    await eventually(
        lambda: api.get("/runs"),
        until=lambda response: {run["id"] for run in response.json()["items"]} == set(sleepers),
        what="only the sleepers to be left",
    )


async def test_purge_by_finish_time_skips_runs_created_after_it_without_reading_them(
    api: httpx.AsyncClient, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    for _ in range(3):
        await create(api)
    old = await finish(lease_store, "default", "succeeded", 3)
    seconds, micros = await redis_client.time()  # the clock created_at is taken by
    cut = datetime.fromtimestamp(seconds + micros / 1e6 + 0.002, tz=UTC)
    await eventually(
        redis_client.time,
        until=lambda now: now[0] + now[1] / 1e6 > cut.timestamp() + 0.002,
        what="the Redis clock to pass the cut",
    )
    for _ in range(5):
        await create(api)
    await finish(lease_store, "default", "succeeded", 5)
    # one call of 3 reaches the 3 old runs at once: the 5 newer ones are not in its way
    page = (
        await api.post("/runs/purge", json={"limit": 3, "finished_before": cut.isoformat()})
    ).json()
    assert sorted(page["ids"]) == sorted(old)
    assert len((await api.get("/runs")).json()["items"]) == 5


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        ("[" * 100_000 + "]" * 100_000, "application/json"),  # deep enough to hurt a parser
        ('{"limit": NaN}', "application/json"),
        ('{"finished_before": Infinity}', "application/json"),
        ('{"limit": 5', "application/json"),  # cut short
        ('{"limit": 5}', "text/plain"),
        ("", "application/json"),
    ],
)
async def test_a_hostile_purge_body_is_a_4xx_problem_and_deletes_nothing(
    api: httpx.AsyncClient, lease_store: LeaseStore, content: str, content_type: str
) -> None:
    run_id = await create(api)
    await finish(lease_store, "default", "succeeded")
    response = await api.post(
        "/runs/purge", content=content, headers={"content-type": content_type}
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await api.get(f"/runs/{run_id}")).status_code == 200
