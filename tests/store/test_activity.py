"""The per-queue activity stream: written by the same scripts as the transitions."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from app.models import RunStatus
from app.store.activity import ACTIVITY_MAXLEN, ActivityStore
from app.store.leases import LeaseStore, Outcome
from app.store.runs import NewRun, RunStore

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
