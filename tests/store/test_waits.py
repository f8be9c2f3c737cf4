"""park_run and signal_run on the real Redis: a parked run wakes through the claim path.

These hold the contract the executor's waits (app/executor/waits.py) rely on, one
script at a time: the claim takes a waiting run back once it is due (fence+2 after
the park), a signal or a person's answer wakes it through the same path, and the
replay of a step answers its recorded outcome.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.errors import LeaseLost
from app.models import RunStatus
from app.settings import Settings
from app.store.context import StoreContext
from app.store.keys import QueueKeys
from app.store.leases.store import ClaimedRun, LeaseStore
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import SignalDelivery, WaitCall, WaitKind, WaitOutcome, WaitStore
from tests.support.polling import eventually
from tests.support.snapshots import changes, snapshot

QUEUE = "default"
OWNER = "w-waits"


@pytest.fixture
def waits(redis_client: aioredis.Redis, settings: Settings) -> WaitStore:
    return WaitStore.for_settings(redis_client, Scripts(), settings)


async def held(run_store: RunStore, lease_store: LeaseStore) -> ClaimedRun:
    await run_store.create(NewRun(handler="demo.echo", input={}))
    (run,) = (await lease_store.claim(QUEUE, OWNER, 1)).runs
    return run


async def claimed_again(lease_store: LeaseStore) -> ClaimedRun:
    """The next run a claim takes, once one is due (the claim promotes due delayed runs)."""
    claim = await eventually(
        lambda: lease_store.claim(QUEUE, OWNER, 1),
        until=lambda claim: bool(claim.runs),
        what="a claim that takes the woken run",
    )
    return claim.runs[0]


async def test_a_sleeping_run_holds_no_lease_and_is_claimed_again_once_due(
    run_store: RunStore,
    lease_store: LeaseStore,
    waits: WaitStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    run = await held(run_store, lease_store)
    nap = WaitCall(run.id, WaitKind.SLEEP, "nap", 1, duration_ms=300)
    parked = await waits.park(run.lease, nap)
    assert parked.outcome == WaitOutcome.PARKED
    assert parked.until_ms is not None
    record = await run_store.get(run.id)
    assert record.status == RunStatus.WAITING
    assert record.owner_id is None
    keys = QueueKeys(settings.prefix, QUEUE)
    assert await redis_client.zscore(keys.leases, run.id) is None
    assert (await lease_store.claim(QUEUE, OWNER, 1)).runs == []  # not before its time

    woken = await claimed_again(lease_store)
    assert (woken.id, woken.fence) == (run.id, run.fence + 2)
    replay = await waits.park(woken.lease, nap)
    assert replay.outcome == WaitOutcome.OVER
    # the old owner's fence is over: a write from it is refused and changes nothing
    before = await snapshot(redis_client, settings.prefix)
    with pytest.raises(LeaseLost):
        await waits.park(run.lease, nap)
    assert not changes(before, await snapshot(redis_client, settings.prefix))


async def test_a_signal_wakes_its_wait_through_the_claim_path_and_replays_its_payload(
    run_store: RunStore, lease_store: LeaseStore, waits: WaitStore
) -> None:
    run = await held(run_store, lease_store)
    call = WaitCall(run.id, WaitKind.SIGNAL, "approve", 1)  # no timeout: waits for it
    assert (await waits.park(run.lease, call)).outcome == (WaitOutcome.PARKED)
    assert await waits.signal(run.id, "other", "1", max_pending=4) == (
        SignalDelivery.BUFFERED,
        False,
    )
    assert (await run_store.get(run.id)).status == RunStatus.WAITING  # not its signal
    assert await waits.signal(run.id, "approve", '{"by":"ana"}', max_pending=4) == (
        SignalDelivery.DELIVERED,
        False,
    )
    woken = await claimed_again(lease_store)
    replay = await waits.park(woken.lease, call)
    assert (replay.outcome, replay.payload_json) == (WaitOutcome.OVER, '{"by":"ana"}')
    other = WaitCall(run.id, WaitKind.SIGNAL, "other", 1)
    taken = await waits.park(woken.lease, other)
    assert (taken.outcome, taken.payload_json) == (WaitOutcome.OVER, "1")  # buffered first


async def test_a_question_is_answered_by_resume_and_its_step_replays_the_answer(
    run_store: RunStore, lease_store: LeaseStore, waits: WaitStore
) -> None:
    run = await held(run_store, lease_store)
    ask = WaitCall(run.id, WaitKind.HUMAN, "ask", 1, question_json='{"q":"ship it?"}')
    assert (await waits.park(run.lease, ask)).outcome == (WaitOutcome.PARKED)
    parked = await run_store.get(run.id)
    assert parked.status == RunStatus.WAITING_HUMAN
    assert parked.escalation == {
        "reason": "ask_human",
        "question": {"q": "ship it?"},
        "step": ask.step,
    }
    await run_store.resume(run.id, {"ship": True})
    woken = await claimed_again(lease_store)
    replay = await waits.park(woken.lease, ask)
    assert (replay.outcome, replay.payload_json) == (WaitOutcome.OVER, '{"ship":true}')


async def test_a_run_being_cancelled_is_not_parked(
    run_store: RunStore,
    lease_store: LeaseStore,
    waits: WaitStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    run = await held(run_store, lease_store)
    assert await run_store.cancel(run.id) == RunStatus.CANCELLING
    before = await snapshot(redis_client, settings.prefix)
    nap = WaitCall(run.id, WaitKind.SLEEP, "nap", 1, duration_ms=60_000)
    answer = await waits.park(run.lease, nap)
    assert answer.outcome == WaitOutcome.CANCELLING
    assert not changes(before, await snapshot(redis_client, settings.prefix))


async def test_a_new_wait_past_the_runs_bound_is_refused_and_writes_nothing(
    run_store: RunStore,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    bounded = WaitStore(StoreContext.for_settings(redis_client, Scripts(), settings), max_waits=2)
    run = await held(run_store, lease_store)
    for n in (1, 2):  # sleeps over at once: each still records its step
        nap = WaitCall(run.id, WaitKind.SLEEP, "nap", n, duration_ms=0)
        assert (await bounded.park(run.lease, nap)).outcome == (WaitOutcome.OVER)
    before = await snapshot(redis_client, settings.prefix)
    third = WaitCall(run.id, WaitKind.SLEEP, "nap", 3, duration_ms=60_000)
    assert (await bounded.park(run.lease, third)).outcome == (WaitOutcome.FULL)
    assert not changes(before, await snapshot(redis_client, settings.prefix))
    replay = WaitCall(run.id, WaitKind.SLEEP, "nap", 1, duration_ms=0)  # a recorded one: fine
    assert (await bounded.park(run.lease, replay)).outcome == (WaitOutcome.OVER)
