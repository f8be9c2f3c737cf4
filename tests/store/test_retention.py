"""Retention by status and per run, and the queued time-to-live, against a real redis-server.

Every key of a finished run (record, events, effects, idempotency key) must carry
the retention of the status it ended in, set by the script that ended it: read
back here with ``PTTL``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from app.models import TERMINAL_STATUSES, RunStatus
from app.reconciler.reconciler import Reconciler
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.leases.store import Lease, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.progress.store import EffectCall, EffectOutcome, ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.lua import include, snippet
from tests.support.polling import eventually

OWNER = "w-retention"
# distinct per status, so a key carrying another status's value is caught
RETENTION_S = {
    "succeeded": 1001.0,
    "failed": 2002.0,
    "cancelled": 3003.0,
    "orphaned": 4004.0,
    "expired": 5005.0,
}
SLACK_MS = 60_000  # a PTTL read a little after the write is a little lower


@dataclass
class Stores:
    runs: RunStore
    leases: LeaseStore
    progress: ProgressStore
    keys: QueueKeys


@pytest.fixture
def stores(
    redis_client: aioredis.Redis, scripts: Scripts, settings: Settings, progress: ProgressStore
) -> Stores:
    tuned = settings.model_copy(
        update={f"retention_{status}_s": value for status, value in RETENTION_S.items()}
        | {"queued_ttl_s": 600.0}
    )
    leases = LeaseStore.for_settings(redis_client, scripts, tuned)
    return Stores(
        RunStore.for_settings(redis_client, scripts, tuned),
        leases,
        progress,
        leases.keys("default"),
    )


async def pttls(client: aioredis.Redis, keys: QueueKeys, run_id: str, idem: str) -> list[int]:
    """PTTL of the record, the events, the effects and the idempotency key, in that order."""
    pipe = client.pipeline(transaction=False)
    for key in (keys.run(run_id), keys.events(run_id), keys.effects(run_id), keys.idem(idem)):
        pipe.pttl(key)
    return [int(value) for value in await pipe.execute()]


def assert_kept_for(ttls: list[int], seconds: float) -> None:
    expected = round(seconds * 1000)
    for ttl in ttls:
        assert expected - SLACK_MS < ttl <= expected, (ttls, expected)


async def claimed_with_effect(s: Stores, idem: str, **options: object) -> tuple[str, int]:
    """A run claimed by OWNER with one recorded effect, so its effects hash exists."""
    created = await s.runs.create(
        NewRun(handler="demo.echo", input={}, idempotency_key=idem, **options)  # type: ignore[arg-type]
    )
    run = (await s.leases.claim("default", OWNER, 1)).runs[0]
    assert run.id == created.run.id
    call = EffectCall(run.id, "charge", 1, idempotent=False)
    await s.progress.start_effect(Lease("default", call.run_id, OWNER, run.fence), call)
    recorded = await s.progress.record_effect(
        Lease("default", call.run_id, OWNER, run.fence), call, EffectOutcome.APPLIED, "{}"
    )
    assert recorded
    return run.id, run.fence


@pytest.mark.parametrize("outcome", ["succeeded", "failed", "cancelled"])
async def test_a_finished_run_keeps_every_key_for_its_status_retention(
    stores: Stores, redis_client: aioredis.Redis, outcome: str
) -> None:
    run_id, fence = await claimed_with_effect(stores, f"idem-{outcome}")
    error = '{"code":"boom","message":"boom"}' if outcome == "failed" else ""
    await stores.leases.finish_and_claim(
        "default",
        OWNER,
        [Outcome(Lease("default", run_id, OWNER, fence), RunStatus(outcome), error_json=error)],
        0,
    )
    assert (await stores.runs.get(run_id)).status == outcome
    ttls = await pttls(redis_client, stores.keys, run_id, f"idem-{outcome}")
    assert_kept_for(ttls, RETENTION_S[outcome])


async def test_a_queued_run_cancelled_keeps_its_keys_for_the_cancelled_retention(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    created = await stores.runs.create(NewRun(handler="demo.echo", input={}, idempotency_key="q"))
    assert await stores.runs.cancel(created.run.id) == RunStatus.CANCELLED
    record, events, effects, idem = await pttls(redis_client, stores.keys, created.run.id, "q")
    assert effects == -2  # never claimed: no effects hash
    assert_kept_for([record, events, idem], RETENTION_S["cancelled"])


async def test_an_orphaned_run_keeps_every_key_for_the_orphaned_retention(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    run_id, _ = await claimed_with_effect(stores, "idem-orphan")
    await asyncio.sleep(stores.leases.lease_ttl_ms / 1000 + 0.1)
    actions = await stores.leases.reconcile("default")
    assert [action.action for action in actions] == ["orphaned"]
    assert_kept_for(
        await pttls(redis_client, stores.keys, run_id, "idem-orphan"), RETENTION_S["orphaned"]
    )


async def test_a_run_asking_for_its_own_retention_keeps_it_whatever_its_status(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    run_id, fence = await claimed_with_effect(stores, "own", retention_ms=77_000)
    assert (await stores.runs.get(run_id)).retention_s == 77.0
    await stores.leases.finish_and_claim(
        "default", OWNER, [Outcome(Lease("default", run_id, OWNER, fence), RunStatus.SUCCEEDED)], 0
    )
    assert_kept_for(await pttls(redis_client, stores.keys, run_id, "own"), 77.0)


async def test_a_running_run_has_no_expiry(stores: Stores, redis_client: aioredis.Redis) -> None:
    run_id, _ = await claimed_with_effect(stores, "live")
    record, events, effects, idem = await pttls(redis_client, stores.keys, run_id, "live")
    assert record == events == effects == idem == -1  # kept: it is not finished


async def test_a_run_nobody_claims_ends_expired_with_one_terminal_event(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    short = await stores.runs.create(
        NewRun(handler="demo.echo", input={}, idempotency_key="short", queued_ttl_ms=200)
    )
    patient = await stores.runs.create(NewRun(handler="demo.echo", input={}))
    await asyncio.sleep(0.3)
    actions = await stores.leases.expire_queued("default")
    assert [(a.run_id, a.action) for a in actions] == [(short.run.id, "expired")]
    run = await stores.runs.get(short.run.id)
    assert run.status == RunStatus.EXPIRED
    assert run.status.is_terminal
    assert run.error is not None and run.error.code == "queued_ttl_expired"
    # the status says "expired" already: the message does not say it again
    assert run.error.message == "not claimed within its queued time-to-live"
    events = await stores.runs.read_events(short.run.id)
    assert [event.type for event in events] == ["created", "expired"]
    assert events[-1].data["reason"] == "queued_ttl"
    assert events[-1].data["queued_for_ms"] >= 200
    record, stream, _effects, idem = await pttls(redis_client, stores.keys, short.run.id, "short")
    assert_kept_for([record, stream, idem], RETENTION_S["expired"])
    # it left the ready list: a worker now claims the patient run, and only it
    lane = stores.keys.lane("demo.echo|")
    assert await redis_client.zrange(lane, 0, -1) == [patient.run.id]
    assert await stores.leases.expire_queued("default") == []  # idempotent


async def test_a_claimed_run_never_expires_even_past_its_queued_ttl(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    created = await stores.runs.create(NewRun(handler="demo.echo", input={}, queued_ttl_ms=100))
    assert await redis_client.zscore(stores.keys.unclaimed, created.run.id) is not None
    await stores.leases.claim("default", OWNER, 1)
    # the first claim takes it out of the index: a served queue's index stays small
    assert await redis_client.zcard(stores.keys.unclaimed) == 0
    await asyncio.sleep(0.2)
    assert await stores.leases.expire_queued("default") == []
    assert (await stores.runs.get(created.run.id)).status == RunStatus.RUNNING


async def test_a_run_cancelled_while_queued_leaves_the_unclaimed_index(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    created = await stores.runs.create(NewRun(handler="demo.echo", input={}))
    await stores.runs.cancel(created.run.id)
    assert await redis_client.zcard(stores.keys.unclaimed) == 0


async def test_lua_derives_the_unclaimed_key_as_store_keys_builds_it(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    derived = await redis_client.eval(
        snippet("return unclaimed_key_of(ARGV[1])", "keys"), 0, stores.keys.run_prefix
    )
    assert derived == stores.keys.unclaimed


async def test_a_cancelled_run_past_its_queued_ttl_stays_cancelled(stores: Stores) -> None:
    created = await stores.runs.create(NewRun(handler="demo.echo", input={}, queued_ttl_ms=100))
    await stores.runs.cancel(created.run.id)
    await asyncio.sleep(0.2)
    assert await stores.leases.expire_queued("default") == []
    events = await stores.runs.read_events(created.run.id)
    assert [event.type for event in events] == ["created", "cancelled"]


async def test_the_reconciler_expires_runs_in_batches_until_none_is_due(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.reconciler.reconciler.RECONCILE_BATCH", 3)
    ids = [
        (await stores.runs.create(NewRun(handler="demo.echo", input={}, queued_ttl_ms=100))).run.id
        for _ in range(7)
    ]
    await asyncio.sleep(0.2)
    reconciler = Reconciler(
        lease_store=stores.leases, run_store=stores.runs, queues=["default"], interval_s=1.0
    )
    original = stores.leases.expire_queued

    async def small_batches(queue: str) -> list:  # type: ignore[type-arg]
        return await original(queue, limit=3)

    monkeypatch.setattr(stores.leases, "expire_queued", small_batches)
    done = await reconciler.scan()
    assert sorted(action.run_id for action in done if action.action == "expired") == sorted(ids)
    page = await stores.runs.list_runs(queue="default", status=RunStatus.EXPIRED, limit=50)
    assert sorted(run.id for run in page.items) == sorted(ids)


def test_the_lua_terminal_set_is_the_models_one() -> None:
    """delete_run and cancel_run judge "finished" by finalize.lua's TERMINAL: no drift."""
    match = re.search(r"^local TERMINAL = \{(?P<body>[^}]*)\}", include("finalize"), re.M)
    assert match
    names = set(re.findall(r"(\w+) = true", match["body"]))
    assert names == {status.value for status in TERMINAL_STATUSES}


async def test_the_reconciler_sweeps_listing_entries_of_runs_whose_retention_ended(
    redis_client: aioredis.Redis, scripts: Scripts, settings: Settings
) -> None:
    brief = settings.model_copy(update={"retention_succeeded_s": 0.05})
    leases = LeaseStore.for_settings(redis_client, scripts, brief)
    runs = RunStore.for_settings(redis_client, scripts, brief)
    keys = leases.keys("default")
    for _ in range(5):
        await runs.create(NewRun(handler="demo.echo", input={}))
    claim = await leases.claim("default", OWNER, 3)
    done = [Outcome(run.lease, RunStatus.SUCCEEDED) for run in claim.runs]
    await leases.finish_and_claim("default", OWNER, done, 0)
    await eventually(
        lambda: redis_client.exists(*(keys.run(run.id) for run in claim.runs)),
        until=lambda left: left == 0,
        what="the finished runs' records to expire",
    )
    assert await redis_client.zcard(keys.runs) == 5  # nobody listed them: entries dangle
    reconciler = Reconciler(lease_store=leases, run_store=runs, queues=["default"], interval_s=1)
    await reconciler.scan()
    assert await redis_client.zcard(keys.runs) == 2  # the two queued runs stay listed
    assert await runs.sweep_index("default", 0, 2) == 2  # a full chunk: resume after it
    assert await runs.sweep_index("default", 2, 2) == 0  # past the end: start over
