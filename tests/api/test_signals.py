"""POST /runs/{id}/signals/{name}: delivered, buffered, refused; hostile input changes nothing."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import WaitCall, WaitKind, WaitOutcome, WaitStore
from tests.support.snapshots import changes, snapshot

OWNER = "w-test"


async def queued(run_store: RunStore) -> str:
    return (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id


def wait_store(settings: Settings, client: aioredis.Redis) -> WaitStore:
    return WaitStore.for_settings(client, Scripts(), settings)


async def test_a_signal_to_a_run_waiting_for_it_is_delivered_and_replays_on_the_next_attempt(
    api: httpx.AsyncClient,
    run_store: RunStore,
    lease_store: LeaseStore,
    settings: Settings,
    redis_client: aioredis.Redis,
) -> None:
    waits = wait_store(settings, redis_client)
    run_id = await queued(run_store)
    (held,) = (await lease_store.claim("default", OWNER, 1)).runs
    call = WaitCall(run_id, WaitKind.SIGNAL, "approve", 1, duration_ms=600_000)
    parked = await waits.park(held.lease, call)
    assert parked.outcome == WaitOutcome.PARKED
    assert (await run_store.get(run_id)).status == RunStatus.WAITING

    response = await api.post(f"/runs/{run_id}/signals/approve", json={"payload": {"ok": 1.5}})
    assert response.status_code == 202, response.text
    assert response.json() == {"id": run_id, "name": "approve", "outcome": "delivered"}
    assert (await run_store.get(run_id)).status == RunStatus.QUEUED
    # queued through the delayed set, due now: the next claim takes it (fence+1 again)
    (again,) = (await lease_store.claim("default", OWNER, 1)).runs
    assert again.fence == held.fence + 2
    replay = await waits.park(again.lease, call)
    assert (replay.outcome, replay.payload_json) == (WaitOutcome.OVER, '{"ok":1.5}')


async def test_signals_to_a_run_not_waiting_are_buffered_in_order_up_to_the_bound(
    api: httpx.AsyncClient,
    run_store: RunStore,
    lease_store: LeaseStore,
    settings: Settings,
    redis_client: aioredis.Redis,
) -> None:
    run_id = await queued(run_store)
    for n in range(settings.max_pending_signals):
        response = await api.post(f"/runs/{run_id}/signals/tick", json={"payload": n})
        assert response.status_code == 202
        assert response.json()["outcome"] == "buffered"
    before = await snapshot(redis_client, settings.prefix)
    full = await api.post(f"/runs/{run_id}/signals/tock", json={"payload": "one too many"})
    assert full.status_code == 429
    assert full.headers["retry-after"]
    assert full.json()["type"].endswith("signal-inbox-full")
    assert not changes(before, await snapshot(redis_client, settings.prefix))

    # the handler's waits take them oldest first, without parking
    waits = wait_store(settings, redis_client)
    (held,) = (await lease_store.claim("default", OWNER, 1)).runs
    for n in range(3):
        call = WaitCall(run_id, WaitKind.SIGNAL, "tick", n + 1)
        answer = await waits.park(held.lease, call)
        assert (answer.outcome, answer.payload_json) == (WaitOutcome.OVER, str(n))
    assert (await run_store.get(run_id)).status == RunStatus.RUNNING


async def test_a_signal_to_a_finished_run_is_409_and_to_an_unknown_one_404(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings, redis_client: aioredis.Redis
) -> None:
    run_id = await queued(run_store)
    await run_store.cancel(run_id)
    before = await snapshot(redis_client, settings.prefix)
    response = await api.post(f"/runs/{run_id}/signals/go", json={"payload": 1})
    assert response.status_code == 409
    assert "cancelled" in response.json()["detail"]
    missing = await api.post("/runs/default.01J0000000000000000000000A/signals/go")
    assert missing.status_code == 404
    assert not changes(before, await snapshot(redis_client, settings.prefix))


@pytest.mark.parametrize(
    ("name", "body", "status"),
    [
        ("go", b'{"payload": "' + b"x" * 70_000 + b'"}', 413),
        ("go", b'{"payload": NaN}', 422),
        ("go", b'{"payload": 1e400}', 422),
        ("go", b'{"payload": ' + b"[" * 2000 + b"]" * 2000 + b"}", 422),
        ("go", b'{"payload": 1, "extra": 2}', 422),
        ("go", b"{", 400),
        ("no%20spaces", b'{"payload": 1}', 422),
        ("a:b", b'{"payload": 1}', 422),
        ("n" * 129, b'{"payload": 1}', 422),
    ],
)
async def test_hostile_signals_are_refused_and_change_nothing(
    api: httpx.AsyncClient,
    run_store: RunStore,
    settings: Settings,
    redis_client: aioredis.Redis,
    name: str,
    body: bytes,
    status: int,
) -> None:
    run_id = await queued(run_store)
    before = await snapshot(redis_client, settings.prefix)
    response = await api.post(
        f"/runs/{run_id}/signals/{name}", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert not changes(before, await snapshot(redis_client, settings.prefix))


async def test_cancelling_a_sleeping_run_ends_it_at_once_and_drops_its_wake(
    run_store: RunStore, lease_store: LeaseStore, settings: Settings, redis_client: aioredis.Redis
) -> None:
    run_id = await queued(run_store)
    (held,) = (await lease_store.claim("default", OWNER, 1)).runs
    call = WaitCall(run_id, WaitKind.SLEEP, "nap", 1, duration_ms=3_600_000)
    await wait_store(settings, redis_client).park(held.lease, call)
    keys = QueueKeys(settings.prefix, "default")
    assert await redis_client.zscore(keys.delayed, run_id) is not None
    assert await run_store.cancel(run_id) == RunStatus.CANCELLED
    assert await redis_client.zscore(keys.delayed, run_id) is None
    assert await redis_client.pttl(keys.waits(run_id)) > 0  # expires with the run


async def test_a_resent_signal_with_its_idempotency_key_is_answered_not_sent_twice(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings, redis_client: aioredis.Redis
) -> None:
    run_id = await queued(run_store)
    url = f"/runs/{run_id}/signals/go"
    first = await api.post(url, json={"payload": {"n": 1}}, headers={"Idempotency-Key": "sig-1"})
    assert first.status_code == 202
    before = await snapshot(redis_client, settings.prefix)
    again = await api.post(url, json={"payload": {"n": 1}, "idempotency_key": "sig-1"})
    assert again.status_code == 200
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json() == first.json() == {"id": run_id, "name": "go", "outcome": "buffered"}
    other = await api.post(url, json={"payload": {"n": 2}}, headers={"Idempotency-Key": "sig-1"})
    assert other.status_code == 409
    assert not changes(before, await snapshot(redis_client, settings.prefix))
    # a resend after the run ended still gets its answer, not a 409
    await run_store.cancel(run_id)
    late = await api.post(url, json={"payload": {"n": 1}}, headers={"Idempotency-Key": "sig-1"})
    assert late.status_code == 200
    bad = await api.post(url, json={"payload": 1}, headers={"Idempotency-Key": "no spaces"})
    assert bad.status_code == 422
