"""The record a create writes, and records written by earlier versions (real Redis).

A create leaves out of the run's record every field whose value is empty or its
default (create.lua ``place_shape``); every reader takes an absent one as that value.
Records written before (``e6a88d8`` and earlier wrote every field, '' or not) stay in
Redis across a worker upgrade with runs in flight: they must be claimed, prioritised,
cancelled, finished and read exactly as a new one is.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.errors import IdempotencyConflict
from app.models import RunStatus
from app.settings import Settings
from app.store.flow.store import FlowStore
from app.store.keys import QueueKeys
from app.store.leases.store import ClaimedRun, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.runs.answers import Created
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

Q = "default"

# What e6a88d8's create_run / create_runs wrote in the record of a plain `demo.echo`
# run beside the fields a create writes now: each empty or at its default (captured
# from that commit's HGETALL; idempotency_key '' is a run created without one).
OLD_ONLY = {
    "metadata": "{}",
    "idempotency_key": "",
    "budget": "",
    "traceparent": "",
    "rate_limits": "",
    "ckey": "",
    "skey": "",
    "lane": "demo.echo|",
}
# the fields of a plain run's record now (idempotency_key only when it has one)
PLAIN_FIELDS = {
    "id",
    "queue",
    "handler",
    "status",
    "input",
    "attempt",
    "max_attempts",
    "on_lease_expired",
    "fence",
    "created_at",
    "root_id",
    "qbase",
    "last_event_id",
}


@pytest.fixture
def flow(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> FlowStore:
    return FlowStore(
        redis_client, scripts=scripts, prefix=settings.prefix, events_maxlen=settings.events_maxlen
    )


async def create(run_store: RunStore, old: bool, **options: Any) -> str:
    """A run as this create writes it, or (old) its record as e6a88d8's wrote it."""
    (created,) = await run_store.create_many([NewRun("demo.echo", {"n": 1}, **options)])
    assert not isinstance(created, Exception)
    if old:
        record = run_store.keys(Q).run(created.run.id)
        await run_store.client.hset(record, mapping=OLD_ONLY)
    return created.run.id


def claimed_view(run: ClaimedRun) -> dict[str, Any]:
    """What a handler is given, but the lease's run id (the same for an old and a new run)."""
    view = dataclasses.asdict(run)
    view["lease"] = (run.lease.queue, run.lease.owner_id, run.lease.fence)
    view.pop("created_at_ms")
    return view


def stored_view(fields: dict[str, Any]) -> dict[str, Any]:
    """A read run's answer without what differs run to run (id, times, event ids)."""
    differs = ("id", "root_id", "created_at", "started_at", "first_started_at", "finished_at")
    return {k: v for k, v in fields.items() if k not in (*differs, "last_event_id")}


async def test_a_plain_run_record_holds_only_fields_with_a_value(
    run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    keys = QueueKeys(settings.prefix, Q)
    plain = await create(run_store, old=False)
    keyed = await create(run_store, old=False, idempotency_key="k-1")
    assert set(await redis_client.hgetall(keys.run(plain))) == PLAIN_FIELDS
    assert set(await redis_client.hgetall(keys.run(keyed))) == PLAIN_FIELDS | {"idempotency_key"}
    full = await create(
        run_store,
        old=False,
        metadata={"team": "a"},
        budget={"max_steps": 3},
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        concurrency_key="c",
        priority=2,
        boost_ms=2000,
    )
    record = await redis_client.hgetall(keys.run(full))
    assert {k: record[k] for k in ("metadata", "budget", "ckey", "lane", "priority")} == {
        "metadata": '{"team":"a"}',
        "budget": '{"max_steps":3}',
        "ckey": "c",
        "lane": "demo.echo|c",
        "priority": "2",
    }


async def test_an_old_record_and_a_new_one_read_claim_and_finish_alike(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    new_id = await create(run_store, old=False)
    old_id = await create(run_store, old=True)
    new_read, old_read = [(await run_store.get(i)).model_dump() for i in (new_id, old_id)]
    assert stored_view(old_read) == stored_view(new_read)
    assert old_read["root_id"] == old_id and new_read["root_id"] == new_id

    claim = await lease_store.claim(Q, "w-1", 2)
    assert [run.id for run in claim.runs] == [new_id, old_id]
    assert claimed_view(claim.runs[0]) == {
        **claimed_view(claim.runs[1]),
        "lease": ("default", "w-1", 1),
    }
    outcomes = [
        Outcome(run.lease, RunStatus.SUCCEEDED, output_json='{"ok":1}') for run in claim.runs
    ]
    codes, _ = await lease_store.finish_and_claim(Q, "w-1", outcomes, 0)
    assert codes == [LeaseAnswer.OK, LeaseAnswer.OK]
    new_read, old_read = [(await run_store.get(i)).model_dump() for i in (new_id, old_id)]
    assert old_read["status"] == RunStatus.SUCCEEDED and old_read["output"] == {"ok": 1}
    assert stored_view(old_read) == stored_view(new_read)


async def test_an_old_record_and_a_new_one_are_reprioritised_and_cancelled_alike(
    run_store: RunStore, lease_store: LeaseStore, flow: FlowStore
) -> None:
    """set_priority and a queued cancel find each run in its lane, with or without `lane`."""
    first_old, first_new = await create(run_store, old=True), await create(run_store, old=False)
    second_old, second_new = await create(run_store, old=True), await create(run_store, old=False)
    await flow.set_priority(second_new, 5, 50_000)
    await flow.set_priority(second_old, 4, 40_000)
    assert await run_store.cancel(first_new) == RunStatus.CANCELLED
    assert await run_store.cancel(first_old) == RunStatus.CANCELLED
    claim = await lease_store.claim(Q, "w-1", 10)
    # rescored in their lane: the boosted runs first, the cancelled ones gone from it
    assert [run.id for run in claim.runs] == [second_new, second_old]
    assert claim.throttled == 0


# shapes of run a batch groups (two runs each, so each shape's records come from its
# template); the time-dependent and per-run values are left out of the comparison
BATCH_SHAPES: list[dict[str, Any]] = [
    {},
    {"idempotency_key": "batch-k"},
    {"metadata": {"team": "a"}, "priority": 2, "boost_ms": 2000, "concurrency_key": "c"},
    {"parent_id": "default.01JABCDEFGHJKMNPQRSTVWXYZ0", "root_id": "default.01JABCDEFGHJKM"},
    {"delay_ms": 60_000, "budget": {"max_steps": 3}},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
]
PER_RUN = ("created_at", "qbase", "run_at", "last_event_id", "idempotency_key")


def same_parts(run_id: str, record: dict[str, str]) -> list[tuple[str, str]]:
    """A record's fields in Redis's order, its own id and the call's times masked."""
    return [(k, "<id>" if v == run_id else "<t>" if k in PER_RUN else v) for k, v in record.items()]


async def test_a_batch_writes_each_record_as_a_create_of_one_does(
    run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """create_runs copies a shape's template into each record: same fields, order, encoding."""
    keys = QueueKeys(settings.prefix, Q)
    big = {"text": "x" * 200}  # past hash-max-listpack-value: the record is a hashtable
    news = []
    for n, shape in enumerate(BATCH_SHAPES):
        for i in range(2):
            options = dict(shape)
            if "idempotency_key" in options:
                options["idempotency_key"] += f"-{n}-{i}"
            news.append(NewRun("demo.echo", big if n == 5 else {"n": i}, **options))
    copies = (await redis_client.info("commandstats")).get("cmdstat_copy", {}).get("calls", 0)
    batch = await run_store.create_many(news)
    stats = await redis_client.info("commandstats")
    assert stats["cmdstat_copy"]["calls"] - copies == len(news)  # every one from a template
    singles = [
        await run_store.create_many(
            [dataclasses.replace(new, idempotency_key=new.idempotency_key and f"one-{i}")]
        )
        for i, new in enumerate(news)
    ]
    assert not await redis_client.exists(keys.create_template)
    for made, (single,) in zip(batch, singles, strict=True):
        assert not isinstance(made, Exception) and not isinstance(single, Exception)
        assert not made.replayed and not single.replayed
        a, b = made.run.id, single.run.id
        record_a, record_b = [await redis_client.hgetall(keys.run(i)) for i in (a, b)]
        encoding = await redis_client.object("encoding", keys.run(a))
        assert encoding == await redis_client.object("encoding", keys.run(b))
        parts_a, parts_b = same_parts(a, record_a), same_parts(b, record_b)
        if encoding != "listpack":  # a hashtable's order is its buckets', not the writes'
            parts_a, parts_b = sorted(parts_a), sorted(parts_b)
        assert parts_a == parts_b
        assert await written_beside(redis_client, keys, a, record_a) == await written_beside(
            redis_client, keys, b, record_b
        )
    encodings = {await redis_client.object("encoding", keys.run(m.run.id)) for m in batch}
    assert encodings == {"listpack", "hashtable"}


async def written_beside(
    redis_client: aioredis.Redis, keys: QueueKeys, run_id: str, record: dict[str, str]
) -> dict[str, Any]:
    """What a create wrote for a run outside its record, its times relative to created_at."""
    created = int(record["created_at"])
    stream = await redis_client.xrange(keys.events(run_id))
    events = [fields for _, fields in stream]
    activity = [
        fields
        for _, fields in await redis_client.xrange(keys.activity)
        if fields["run_id"] == run_id
    ]
    # one activity entry per event, naming it; the record names the last
    assert [fields.pop("event_id") for fields in activity] == [i for i, _ in stream]
    assert record["last_event_id"] == stream[-1][0]
    for fields in (*events, *activity):
        assert int(fields.pop("ts")) == created
    assert {fields.pop("run_id") for fields in activity} == {run_id}
    for fields in events:
        data = json.loads(fields["data"])
        if "until_ms" in data:  # a delayed start's wait, as ms after the create
            data["until_ms"] -= created
        fields["data"] = data
    lane = record.get("lane", "demo.echo|")
    scores = {
        name: await redis_client.zscore(key, run_id)
        for name, key in (
            ("runs", keys.runs),
            ("unclaimed", keys.unclaimed),
            ("lane", keys.lane(lane)),
            ("delayed", keys.delayed),
        )
    }
    return {
        "events": events,
        "activity": activity,
        "scores": {k: v and v - created for k, v in scores.items()},
        "placed": await redis_client.hget(keys.placed, lane),
    }


@pytest.mark.parametrize("shape", [{}, {"concurrency_key": "c"}], ids=["plain", "general"])
async def test_a_template_left_by_an_aborted_call_adds_nothing_to_a_batch_record(
    shape: dict[str, Any], run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """A call that errored after placing its template (Redis keeps a script's writes) left it.

    The next batch's records must hold only their own shape's fields: a stale field
    copied in (another shape's concurrency key, budget) would put a run in a lane nobody
    counts it in.
    """
    keys = QueueKeys(settings.prefix, Q)
    stale = {"id": "", "queue": Q, "traceparent": "t", "budget": '{"max_steps":1}', "priority": "9"}
    await redis_client.hset(keys.create_template, mapping=stale)
    batch = await run_store.create_many([NewRun("demo.echo", {"n": i}, **shape) for i in range(2)])
    (single,) = await run_store.create_many([NewRun("demo.echo", {"n": 0}, **shape)])
    assert not isinstance(single, Exception)
    expected = await redis_client.hgetall(keys.run(single.run.id))
    for made in batch:
        assert not isinstance(made, Exception)
        record = await redis_client.hgetall(keys.run(made.run.id))
        assert sorted(record) == sorted(expected)
    assert not await redis_client.exists(keys.create_template)


def answer(outcome: Created | Exception) -> tuple[Any, str]:
    """An outcome as (replayed, run id), ("conflict", the key's run) or (repr, '')."""
    if isinstance(outcome, IdempotencyConflict):
        return "conflict", outcome.run_id
    if isinstance(outcome, Created):
        return outcome.replayed, outcome.run.id
    return repr(outcome), ""


async def world_state(redis_client: aioredis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under prefix (the prefix cut off): records less their times, keys' values,
    event types, zset members."""
    keys = QueueKeys(prefix, Q)
    state: dict[str, Any] = {}
    async for key in redis_client.scan_iter(match=f"{prefix}:*"):
        kind = await redis_client.type(key)
        found: Any = kind
        if kind == "hash" and key.startswith(keys.run("")):
            record = await redis_client.hgetall(key)
            found = {k: v for k, v in record.items() if k not in PER_RUN}
        elif kind == "string":
            found = await redis_client.get(key)
        elif kind == "stream" and key.startswith(keys.events("")):
            found = [f["type"] for _, f in await redis_client.xrange(key)]
        elif kind == "zset":
            found = await redis_client.zrange(key, 0, -1)
        state[key.removeprefix(prefix)] = found
    return state


async def test_a_plain_batch_answers_and_writes_replays_as_one_by_one_creates_do(
    redis_client: aioredis.Redis, scripts: Scripts, settings: Settings
) -> None:
    """create_plain's SETNX and COPY decide as create_one's reads do, and leave what was there.

    The same creates, in two worlds: one batch (a plain segment: the key's SETNX and the
    record's COPY are its checks) and one create per call (create_one: EXISTS and GET
    first). Runs whose record exists (with a new key, none, or a used one), keys reused
    with the same and another body, and a run id twice in the batch: the same answers,
    and the same keys, idempotency keys, records and events.
    """

    def rid(n: int) -> str:
        return f"{Q}.01M8VYQ5NAB19RSBWN3QFA63{n:02d}"  # R<n> below

    def new(n: int, key: str | None, body: int = 0) -> NewRun:
        return NewRun("demo.echo", {"b": body}, idempotency_key=key, run_id=rid(n))

    before = [new(0, None), new(1, "k-1")]  # a run without a key, a keyed one
    batch = [
        new(2, "a"),  # created
        new(3, None),  # created, no key
        new(4, "a"),  # the same key and body: a replay of R02
        new(5, "a", body=1),  # the same key, another body: a conflict with R02
        new(0, "n"),  # R00's record exists: a replay; "n" is not written
        new(0, None),  # the same, without a key
        new(1, "k-1"),  # R01 again with its own key
        new(0, "k-1", body=1),  # R00's record exists, a used key of another body: replayed
        new(6, "k-1", body=1),  # a conflict with R01
        new(7, "n"),  # created: the replay of R00 left "n" unused
        new(8, None),  # created,
        new(8, "m"),  # then its id again with a new key: replayed, "m" not written
    ]
    worlds = []
    for name in ("batch", "single"):
        own = settings.model_copy(update={"prefix": f"{settings.prefix}-{name}"})
        store = RunStore.for_settings(redis_client, scripts, own)
        for run in before:
            await store.create_many([run])
        stats = await redis_client.info("commandstats")
        setnx = stats.get("cmdstat_setnx", {}).get("calls", 0)
        if name == "single":
            outcomes = [(await store.create_many([run]))[0] for run in batch]
        else:
            outcomes = await store.create_many(batch)
            stats = await redis_client.info("commandstats")
            assert stats["cmdstat_setnx"]["calls"] > setnx  # the plain path ran
        worlds.append(([answer(o) for o in outcomes], await world_state(redis_client, own.prefix)))
    (answers, state), (single_answers, single_state) = worlds
    assert answers == single_answers
    assert state == single_state
    created, replayed = False, True
    assert answers == [
        (created, rid(2)),
        (created, rid(3)),
        (replayed, rid(2)),
        ("conflict", rid(2)),
        (replayed, rid(0)),
        (replayed, rid(0)),
        (replayed, rid(1)),
        (replayed, rid(0)),
        ("conflict", rid(1)),
        (created, rid(7)),
        (created, rid(8)),
        (replayed, rid(8)),
    ]
    idem = QueueKeys("", Q).idem
    assert state[idem("n")].startswith(rid(7) + " ")
    assert idem("m") not in state
