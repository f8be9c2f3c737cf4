"""The per-queue activity stream: written by the same scripts as the transitions."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from app.models import RunStatus
from app.store.leases.store import LeaseStore, Outcome
from app.store.queues.activity import ACTIVITY_MAXLEN, ActivityStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

OWNER = "w-test-1"


async def test_lifecycle_transitions_reach_the_activity_stream_and_handler_events_do_not(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    activity = ActivityStore(redis_client, prefix=run_store.prefix)
    start = await activity.newest("default")
    run = (await run_store.create(NewRun(handler="demo.echo", input={}))).run
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    await lease_store.append_events(
        claimed.lease,
        [("token", json.dumps({"text": "hi"})), ("wait", json.dumps({"kind": "tool"}))],
    )
    await lease_store.finish_and_claim(
        "default", OWNER, [Outcome(claimed.lease, RunStatus.SUCCEEDED, output_json="1")], 0
    )
    entries = await activity.read("default", after=start, count=100)
    assert [(e.type, e.status) for e in entries] == [
        ("created", RunStatus.QUEUED),
        ("claimed", RunStatus.RUNNING),
        ("succeeded", RunStatus.SUCCEEDED),
    ]
    assert {e.run_id for e in entries} == {run.id}
    assert [e.fence for e in entries] == [0, claimed.fence, claimed.fence]
    # the event id is the run stream's: a client compares it with Run.last_event_id
    assert entries[-1].event_id == (await run_store.get(run.id)).last_event_id
    events = await run_store.read_events(run.id)
    assert [e.id for e in events if e.type in ("created", "claimed", "succeeded")] == [
        e.event_id for e in entries
    ]


async def test_the_stream_is_capped_and_an_old_position_is_reported_as_trimmed(
    run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    activity = ActivityStore(redis_client, prefix=run_store.prefix)
    await run_store.create(NewRun(handler="demo.echo", input={}))
    oldest = (await activity.read("default", after="0-0", count=1))[0].id
    assert not await activity.trimmed("default", after="0-0")
    for _ in range(ACTIVITY_MAXLEN * 2):
        await run_store.cancel(
            (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
        )
    length = await redis_client.xlen(run_store.keys("default").activity)
    assert ACTIVITY_MAXLEN <= length < ACTIVITY_MAXLEN * 2
    assert await activity.trimmed("default", after=oldest)
    newest = await activity.newest("default")
    assert not await activity.trimmed("default", after=newest)


async def test_claims_and_finishes_in_batches_keep_the_stream_capped(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    # claim_runs and finish_runs trim the stream once per call, not per entry: a
    # drain of batches still leaves it at about the cap, every entry of its last
    # call kept, and an old position still reads as trimmed
    activity = ActivityStore(redis_client, prefix=run_store.prefix)
    first = (await run_store.create(NewRun(handler="demo.echo", input={}))).run
    oldest = (await activity.read("default", after="0-0", count=1))[0].id
    for _ in range(ACTIVITY_MAXLEN // 50 + 1):
        for _ in range(50):
            await run_store.create(NewRun(handler="demo.echo", input={}))
    key = run_store.keys("default").activity
    outcomes: list[Outcome] = []
    done: set[str] = set()
    while True:
        answers, claim = await lease_store.finish_and_claim("default", OWNER, outcomes, 50)
        assert set(answers) <= {"OK"}
        done.update(o.lease.run_id for o in outcomes)
        length = await redis_client.xlen(key)
        assert length < ACTIVITY_MAXLEN + 300
        if not claim.runs:
            break
        outcomes = [Outcome(run.lease, RunStatus.SUCCEEDED, output_json="1") for run in claim.runs]
    assert first.id in done and len(done) == ACTIVITY_MAXLEN // 50 * 50 + 51
    assert await redis_client.xlen(key) >= ACTIVITY_MAXLEN
    assert await activity.trimmed("default", after=oldest)
    newest = await activity.read("default", after="0-0", count=ACTIVITY_MAXLEN * 2)
    # the last finish (the one run left) ends the stream, its claim before it
    assert [e.type for e in newest[-2:]] == ["claimed", "succeeded"]
    assert newest[-1].id == await activity.newest("default")
