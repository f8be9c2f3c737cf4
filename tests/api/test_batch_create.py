"""POST /runs/batch against the test's real Redis: one outcome per item, bad items write nothing.

Each item must be judged exactly as POST /runs judges a body, alone: what a
client sees is the same status and problem in the item's place, and that the
refused items left no key behind while the valid ones are queued.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.client import ApiError, AsyncClient
from app.models.api import CreateRunsResult
from app.settings import Settings
from app.store.keys import QueueKeys
from tests.api.test_memory import HIGH_WATER, filler, memory_settings, start_api
from tests.support.memory import SmallRedis

ECHO: dict[str, Any] = {"handler": "demo.echo", "input": {"message": "hi"}}


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


async def run_keys(client: aioredis.Redis, prefix: str) -> list[str]:
    """Every run record and event stream under the test's prefix."""
    keys = await client.keys(f"{prefix}:*")
    return sorted(key for key in keys if ":run:" in key or ":events:" in key)


def post_json(api: httpx.AsyncClient, path: str, body: object) -> Any:
    """POST ``body`` as JSON, NaN included (httpx's json= refuses to send it)."""
    return api.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


async def post_batch(api: httpx.AsyncClient, items: list[Any]) -> list[dict[str, Any]]:
    response = await post_json(api, "/runs/batch", {"items": items})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    outcomes: list[dict[str, Any]] = response.json()["items"]
    assert len(outcomes) == len(items)
    return outcomes


async def test_each_item_gets_the_answer_a_single_create_would_give_in_request_order(
    api: httpx.AsyncClient, settings: Settings, redis_client: aioredis.Redis, prefix: str
) -> None:
    bad: list[Any] = [
        {**ECHO, "surprise": 1},  # unknown field
        {"handler": "no.such_handler"},
        {"handler": "demo.sleep", "input": {"seconds": "long"}},  # invalid for the handler
        {**ECHO, "queue": "nobody-declared-this"},
        {**ECHO, "input": {"x": float("nan")}},
        {**ECHO, "input": nested(settings.max_input_depth + 1)},
        {**ECHO, "retention_s": settings.retention_max_s * 2},
        {**ECHO, "input": {"message": "x" * settings.max_input_bytes}},
        "not an object",
    ]
    singles = [await post_json(api, "/runs", item) for item in bad]
    before = await run_keys(redis_client, prefix)
    assert before == []  # the single creates refused every one
    items = [ECHO, *bad, {**ECHO, "input": {"message": "last"}}]
    outcomes = await post_batch(api, items)

    assert [o["status"] for o in outcomes] == [201, *(s.status_code for s in singles), 201]
    for outcome, single in zip(outcomes[1:-1], singles, strict=True):
        assert outcome["problem"]["type"] == single.json()["type"]
        assert "run" not in outcome
    # the schema errors say which item: under body.items.<index>
    assert outcomes[1]["problem"]["errors"][0]["loc"][:3] == ["body", "items", 1]
    assert outcomes[5]["problem"]["errors"][0]["loc"] == ["body", "items", 5, "input", "x"]
    assert "nobody-declared-this" in outcomes[4]["problem"]["detail"]
    created = [outcomes[0]["run"], outcomes[-1]["run"]]
    assert [run["input"] for run in created] == [{"message": "hi"}, {"message": "last"}]
    for run in created:
        fetched = (await api.get(f"/runs/{run['id']}")).json()
        assert fetched["status"] == "queued"
        assert fetched["created_at"] == run["created_at"]
    # only the two valid items left records (a run hash and an events stream each)
    assert len(await run_keys(redis_client, prefix)) == 4
    queues = (await api.get("/queues")).json()["items"]
    assert {q["name"]: q["ready"] for q in queues}["default"] == 2


async def test_idempotency_keys_replay_with_200_and_conflict_with_409_per_item(
    api: httpx.AsyncClient,
) -> None:
    items = [
        {**ECHO, "idempotency_key": "order-1"},
        {**ECHO, "idempotency_key": "order-2"},
        {**ECHO, "idempotency_key": "order-1"},  # the same key twice in one batch: a replay
    ]
    first = await post_batch(
        api, [*items, {**ECHO, "input": {"message": "other"}, "idempotency_key": "order-1"}]
    )
    # as four requests in that order: the same body again replays, another body conflicts
    assert [o["status"] for o in first] == [201, 201, 200, 409]
    assert first[2]["run"]["id"] == first[0]["run"]["id"]
    assert first[0]["run"]["id"] in first[3]["problem"]["detail"]

    again = await post_batch(api, [*items, {**ECHO, "idempotency_key": "order-3"}])
    assert [o["status"] for o in again] == [200, 200, 200, 201]
    assert [o["run"]["id"] for o in again[:2]] == [o["run"]["id"] for o in first[:2]]

    changed = await post_batch(
        api, [{**ECHO, "input": {"message": "other"}, "idempotency_key": "order-2"}]
    )
    assert changed[0]["status"] == 409
    assert changed[0]["problem"]["type"].endswith("/idempotency-conflict")
    assert first[1]["run"]["id"] in changed[0]["problem"]["detail"]


async def test_per_run_options_are_kept_and_queues_are_sent_concurrently(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    assert (await api.put("/queues/emails")).status_code in (200, 201)
    items = [
        {**ECHO, "retention_s": 60.0, "queued_ttl_s": 30.0, "max_attempts": 3},
        {**ECHO, "queue": "emails", "metadata": {"tenant": "acme"}},
        {**ECHO, "budget": {"max_duration_s": 5}},
    ]
    outcomes = await post_batch(api, items)
    assert [o["status"] for o in outcomes] == [201, 201, 201]
    first = (await api.get(f"/runs/{outcomes[0]['run']['id']}")).json()
    assert first["retention_s"] == 60.0
    assert first["max_attempts"] == 3
    second = (await api.get(f"/runs/{outcomes[1]['run']['id']}")).json()
    assert second["queue"] == "emails"
    assert second["metadata"] == {"tenant": "acme"}
    # queued_ttl_s: the run ends `expired` if still unclaimed 30 s from now (Redis clock)
    unclaimed = QueueKeys(prefix, "default").unclaimed
    deadlines = {
        run_id: await redis_client.zscore(unclaimed, run_id)
        for run_id in (outcomes[0]["run"]["id"], outcomes[2]["run"]["id"])
    }
    now_s, now_us = await redis_client.time()
    now_ms = now_s * 1000 + now_us // 1000
    first_deadline = deadlines[outcomes[0]["run"]["id"]]
    assert first_deadline is not None and now_ms < first_deadline <= now_ms + 30_000
    default_deadline = deadlines[outcomes[2]["run"]["id"]]
    assert default_deadline is not None and default_deadline > now_ms + 30_000


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"items": "nope"}, 422),
        ({"items": [ECHO], "extra": 1}, 422),
        ([ECHO], 422),
        ({}, 422),
        ({"items": {"0": ECHO}}, 422),
    ],
)
async def test_a_body_that_is_not_a_batch_is_a_422_and_writes_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    prefix: str,
    body: object,
    status: int,
) -> None:
    response = await api.post("/runs/batch", json=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert await run_keys(redis_client, prefix) == []


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (b'{"items": [', {"content-type": "application/json"}, 400),
        (b'{"items": []}', {"content-type": "text/plain"}, 415),
        (b"", {"content-type": "application/json"}, 422),
        (
            b'{"items":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            {"content-type": "application/json"},
            422,
        ),
        (
            b'{"items": [' + b'{"handler":"demo.echo","input":NaN},' * 3 + b"{}]}",
            {"content-type": "application/json"},
            200,
        ),
    ],
)
async def test_hostile_bodies_are_answered_not_crashed_on(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    prefix: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
) -> None:
    response = await api.post("/runs/batch", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert await run_keys(redis_client, prefix) == []
    if status == 200:  # NaN items and an item without a handler: each refused alone
        assert [o["status"] for o in response.json()["items"]] == [422, 422, 422, 422]


async def test_more_items_than_the_setting_allows_is_413_and_writes_nothing(
    settings: Settings, redis_client: aioredis.Redis, prefix: str
) -> None:
    app = create_app(settings.model_copy(update={"batch_max_items": 5}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            assert (await post_batch(api, [ECHO] * 5))[4]["status"] == 201
            before = await run_keys(redis_client, prefix)
            refused = await api.post("/runs/batch", json={"items": [ECHO] * 6})
            assert refused.status_code == 413
            assert "LEASEHOLD_BATCH_MAX_ITEMS" in refused.json()["detail"]
            assert await run_keys(redis_client, prefix) == before


async def test_an_empty_batch_creates_nothing_and_a_header_key_is_refused(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    assert await post_batch(api, []) == []
    refused = await api.post(
        "/runs/batch", json={"items": [ECHO]}, headers={"Idempotency-Key": "whole-batch"}
    )
    assert refused.status_code == 400
    assert "idempotency_key" in refused.json()["detail"]
    assert await run_keys(redis_client, prefix) == []


async def test_a_batch_past_the_memory_high_water_is_refused_whole_with_retry_after(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
        assert (await api.post("/runs", json=filler(0))).status_code == 201
        small_redis.set_max(int(small_redis.used_bytes() / (HIGH_WATER + 0.15)))
        await api.get("/readyz")  # a fresh reading for admission, not the cached one
        refused = await api.post("/runs/batch", json={"items": [filler(i) for i in range(1, 4)]})
        assert refused.status_code == 503
        assert refused.json()["type"].endswith("/admission-refused")
        assert refused.headers["Retry-After"]
        listed = (await api.get("/runs", params={"queue": "filler"})).json()["items"]
        assert len(listed) == 1


async def test_items_redis_refuses_for_memory_are_each_a_typed_503(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    # admission keeps its first reading for the whole test, so Redis refuses the writes itself
    settings = memory_settings(small_redis, prefix, tmp_path, check_interval_s=60)
    async with start_api(settings) as api:
        small_redis.allow(4_000_000)
        assert (await api.post("/runs", json=filler(0))).status_code == 201
        small_redis.set_max(small_redis.used_bytes() // 2)
        outcomes = await post_batch(api, [filler(1), {"handler": "nope.nope"}])
        assert outcomes[0]["status"] == 503
        assert outcomes[0]["problem"]["type"].endswith("/redis-out-of-memory")
        assert outcomes[1]["status"] == 422
        assert small_redis.oom_refusals() >= 1


async def test_async_client_create_many_returns_each_outcome(settings: Settings) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient("http://localhost", transport=transport) as client:
            result = await client.create_many(
                [
                    {"handler": "demo.echo", "input": {"message": "a"}, "idempotency_key": "a"},
                    {"handler": "nope.nope"},
                ]
            )
            assert isinstance(result, CreateRunsResult)
            assert [item.status for item in result.items] == [201, 422]
            assert result.items[0].run is not None
            assert result.items[0].run.input == {"message": "a"}
            assert result.items[1].problem is not None
            assert result.items[1].problem.type.endswith("/unknown-handler")
            with pytest.raises(ApiError) as refused:
                await client.create_many([{"handler": "demo.echo"}] * 20_000)
            assert refused.value.status == 413


# what differs between two creates of the same body: the run's own id, time and key, and
# what is derived from them (its tree's root is itself, its stream ids are its own); the
# singleton key, which the test gives each its own; a delayed start is compared as a delay
_OWN_FIELDS = {"id", "created_at", "idempotency_key", "root_id", "last_event_id", "qbase"}
_OWN_FIELDS |= {"singleton_key", "skey", "lane", "run_at"}


def _same_parts(run: dict[str, Any]) -> dict[str, Any]:
    same = {name: value for name, value in run.items() if name not in _OWN_FIELDS}
    if run.get("run_at"):
        start, created = (run[name] for name in ("run_at", "created_at"))
        if start.isdigit():  # Redis's epoch ms, else the API's ISO times
            same["delay"] = int(start) - int(created)
        else:
            same["delay"] = datetime.fromisoformat(start) - datetime.fromisoformat(created)
    return same


@pytest.mark.parametrize(
    "body",
    [
        ECHO,
        {
            **ECHO,
            "metadata": {"tenant": "t-1", "n": 3},
            "budget": {"max_steps": 5},
            "max_attempts": 3,
            "on_lease_expired": "retry",
            "priority": 7,
            "concurrency_key": "tenant-1",
            "retention_s": 600,
            "queued_ttl_s": 900,
        },
        {**ECHO, "delay_s": 60},
        {**ECHO, "singleton_key": "nightly"},
    ],
    ids=["plain", "options", "delayed", "singleton"],
)
async def test_a_batch_run_and_a_single_run_are_the_same_run_to_a_user(
    api: httpx.AsyncClient,
    run_store: Any,
    redis_client: aioredis.Redis,
    settings: Settings,
    body: dict[str, Any],
) -> None:
    """The answer, the stored run, its record in Redis and its events: equal but for its id."""
    single = await post_json(api, "/runs", {**body, "idempotency_key": "one"})
    assert single.status_code == 201, single.text
    if "singleton_key" in body:  # a second run of the key would meet the first: another key
        body = {**body, "singleton_key": "nightly-2"}
    (outcome,) = await post_batch(api, [{**body, "idempotency_key": "two"}])
    assert outcome["status"] == 201
    answers = [single.json(), outcome["run"]]
    fetched = [(await api.get(f"/runs/{run['id']}")).json() for run in answers]
    assert fetched[1]["idempotency_key"] == "two"
    assert _same_parts(answers[0]) == _same_parts(answers[1])
    for answer, run in zip(answers, fetched, strict=True):
        # what the create answered is what a read gives (but the event id, not known then)
        assert answer == {**run, "last_event_id": None}
    assert _same_parts(fetched[0]) == _same_parts(fetched[1])

    keys = QueueKeys(settings.prefix, "default")
    records = [await redis_client.hgetall(keys.run(run["id"])) for run in answers]
    assert _same_parts(records[0]) == _same_parts(records[1])
    events = []
    for run, record in zip(answers, records, strict=True):
        stream = [(e.type, e.fence, e.data) for e in await run_store.read_events(run["id"])]
        for _, _, data in stream:
            data.pop("singleton_key", None)
            if "until_ms" in data:
                data["until_ms"] -= int(record["created_at"])
        events.append(stream)
    assert events[0] == events[1]
    assert events[0][0][0] == "created"
    # both wait for a worker the same way: in their lane, or (delayed) until their time
    waiting = await redis_client.get(f"{keys.tag}:queued")
    assert int(waiting or 0) == (0 if "delay_s" in body else 2)
    assert await redis_client.zcard(keys.delayed) == (2 if "delay_s" in body else 0)


async def test_runs_across_script_chunks_meet_in_order_and_each_is_created_once(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """More runs than one create_runs call takes (100): the calls meet in order."""
    items: list[Any] = [
        {**ECHO, "input": {"message": f"m{i}"}, "idempotency_key": f"k{i}"} for i in range(230)
    ]
    items[150] = {**items[3]}  # a replay of a run created in the first chunk
    items[220] = {**items[4], "input": {"message": "other"}}  # a conflict with it
    outcomes = await post_batch(api, items)
    statuses = [o["status"] for o in outcomes]
    assert statuses.count(201) == 228
    assert (statuses[150], statuses[220]) == (200, 409)
    assert outcomes[150]["run"]["id"] == outcomes[3]["run"]["id"]
    created = [o["run"]["id"] for o in outcomes if o["status"] == 201]
    assert len(set(created)) == 228
    keys = QueueKeys(settings.prefix, "default")
    assert await redis_client.zcard(keys.runs) == 228
    assert int(await redis_client.get(f"{keys.tag}:queued")) == 228


async def test_every_answer_of_a_mixed_batch_is_what_a_read_of_its_run_gives(
    api: httpx.AsyncClient,
) -> None:
    """Runs of a batch share their answer's encoding per shape: each must still be its own.

    Two handlers, metadata and none, with and without a key, text that needs
    escaping, and metadata that looks like the encoder's stand-ins: every run
    answered is the run a GET reads (but the event id, not known at create).
    """
    items: list[dict[str, Any]] = [
        {**ECHO, "idempotency_key": "plain-1"},
        {**ECHO, "input": {"message": 'quote " and \\ and é ☃'}, "idempotency_key": "key:2"},
        {"handler": "demo.sleep", "input": {"seconds": 0}, "metadata": {"tenant": "t"}},
        {**ECHO, "metadata": {"id": "x", "root_id": "input", "idempotency_key": None}},
        {**ECHO, "idempotency_key": "plain-5"},
        {**ECHO, "priority": 3, "idempotency_key": "plain-6", "retention_s": 60},
    ]
    outcomes = await post_batch(api, items)
    assert [o["status"] for o in outcomes] == [201] * len(items)
    for item, outcome in zip(items, outcomes, strict=True):
        run = outcome["run"]
        fetched = (await api.get(f"/runs/{run['id']}")).json()
        assert run == {**fetched, "last_event_id": None}
        assert run["input"] == item["input"]
        assert run["idempotency_key"] == item.get("idempotency_key")
        assert run["root_id"] == run["id"]
    assert len({o["run"]["id"] for o in outcomes}) == len(items)


def test_an_answer_shape_is_the_runs_whole_encoding_and_a_stand_in_in_the_data_falls_back() -> None:
    """A shape's answer is byte for byte the run's fields over the defaults, encoded whole;
    metadata holding the encoder's own stand-in cannot cut the answer in the wrong place."""
    from pydantic_core import to_json

    from app.store.codec import dumps
    from app.store.runs import answers as runs
    from app.store.runs.bindings import CreateReply
    from app.store.runs.new import NewRun

    def fresh(i: int, metadata: dict[str, Any]) -> tuple[NewRun, CreateReply]:
        new = NewRun(
            handler="demo.echo",
            input={"message": f"run {i}"},
            idempotency_key=None if i % 2 else f"k-{i}",
            metadata=metadata,
            encoded_input=dumps({"message": f"run {i}"}),
        )
        return new, CreateReply("OK", f"default.01JDZ{i:021d}", 1_700_000_000_000)

    shapes = runs.AnswerShapes()
    for i in range(4):
        for metadata in ({}, {"n": i % 2}, {"x": f"{runs._MARK}:root_id:"}):
            new, reply = fresh(i, metadata)
            whole = to_json(runs._answer_of(runs.queued_fields(new, reply))).decode()
            assert shapes.encode(new, reply) == whole


# a value other than the default for every field of NewRun (a new field must be added here)
_OTHER_VALUES: dict[str, Any] = {
    "handler": "demo.sleep",
    "input": {"seconds": 1},
    "queue": "emails",
    "max_attempts": 5,
    "on_lease_expired": "retry",
    "idempotency_key": "k",
    "metadata": {"team": "a"},
    "budget": {"max_steps": 2},
    "retention_ms": 5000,
    "queued_ttl_ms": 6000,
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "start_at_ms": 1_800_000_000_000,
    "delay_ms": 7000,
    "rate_limits": (),
    "concurrency_key": "c1",
    "singleton_key": "s1",
    "on_conflict": "reject",
    "priority": 3,
    "boost_ms": 100,
    "parent_id": "default.01JDZ000000000000000000001",
    "root_id": "default.01JDZ000000000000000000002",
    "depth": 2,
    "versioning": "pinned",
    "run_id": "default.01JDZ000000000000000000003",
    "encoded_input": '{"seconds":1}',
}


def test_runs_that_differ_in_what_their_answer_shows_never_share_a_shape() -> None:
    """Two fresh runs whose answers differ in more than the shape's holes (id, input,
    idempotency key, root id) must have different shape keys, whatever NewRun field
    they differ in: else one would be answered with the other's queue, priority, ..."""
    import dataclasses

    from app.store.runs import answers as runs
    from app.store.runs.bindings import CreateReply
    from app.store.runs.new import NewRun

    assert {f.name for f in dataclasses.fields(NewRun)} == set(_OTHER_VALUES)
    reply = CreateReply("OK", "default.01JDZ000000000000000000009", 1_700_000_000_000)
    base = NewRun(handler="demo.echo", input={})
    holes = set(runs._PER_RUN)
    for name, value in _OTHER_VALUES.items():
        other = dataclasses.replace(base, **{name: value})
        answers = [runs.queued_fields(new, reply) for new in (base, other)]
        shown = [{k: v for k, v in answer.items() if k not in holes} for answer in answers]
        if shown[0] != shown[1]:
            assert runs._shape_key(base, reply) != runs._shape_key(other, reply), name


async def test_a_chunk_indexes_plain_keyed_and_delayed_runs_as_one_by_one_creates_would(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """create_runs writes a chunk's index once (runs, unclaimed, plain lanes, queued):
    every run created is in it exactly once, each lane is placed in the ring once, in
    the order its first run came, a replay adds nothing, and keyed runs count as before."""
    items: list[dict[str, Any]] = [
        {**ECHO, "idempotency_key": "p-1"},
        {**ECHO, "concurrency_key": "c1"},
        {"handler": "demo.sleep", "input": {"seconds": 0}},
        {**ECHO, "idempotency_key": "p-2"},
        {**ECHO, "singleton_key": "s1"},
        {**ECHO, "concurrency_key": "c1"},
        {**ECHO, "delay_s": 60},
        {**ECHO, "idempotency_key": "p-1"},  # a replay of the first
        {**ECHO, "idempotency_key": "p-3"},
    ]
    outcomes = await post_batch(api, items)
    assert [o["status"] for o in outcomes] == [201] * 7 + [200, 201]
    ids = [o["run"]["id"] for o in outcomes]
    assert ids[7] == ids[0]
    created = [run_id for i, run_id in enumerate(ids) if i != 7]
    keys = QueueKeys(settings.prefix, "default")
    assert sorted(await redis_client.zrange(keys.runs, 0, -1)) == sorted(created)
    assert sorted(await redis_client.zrange(keys.unclaimed, 0, -1)) == sorted(created)
    assert int(await redis_client.get(f"{keys.tag}:queued") or 0) == 7  # all but the delayed
    ring = await redis_client.lrange(keys.ready, 0, -1)
    assert ring == ["demo.echo|", "demo.echo|c1", "demo.sleep|", "!s1"]
    assert sorted(await redis_client.hkeys(f"{keys.tag}:placed")) == sorted(ring)
    plain = await redis_client.zrange(f"{keys.tag}:lane:demo.echo|", 0, -1)
    assert plain == [ids[0], ids[3], ids[8]]  # in create order
    keyed = await redis_client.zrange(f"{keys.tag}:lane:demo.echo|c1", 0, -1)
    assert keyed == [ids[1], ids[5]]
    assert await redis_client.zrange(keys.delayed, 0, -1) == [ids[6]]


async def test_flat_inputs_pass_the_content_rule_and_non_finite_numbers_in_them_do_not(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    """An object of strings, integers, booleans and null skips the content rule's walk:
    the floats it does not skip (Infinity, -Infinity, 1e400, NaN) are still each a 422."""
    numbers = ("12345678901234567890", "Infinity", "-Infinity", "1e400")
    items = [
        '{"handler":"demo.echo","input":{"message":"m","n":' + n + ',"ok":true,"none":null}}'
        for n in numbers
    ]
    items.append('{"handler":"demo.echo","input":{"x":1},"metadata":{"m":NaN}}')
    content = '{"items":[' + ",".join(items) + "]}"
    response = await api.post(
        "/runs/batch", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    outcomes = response.json()["items"]
    assert [o["status"] for o in outcomes] == [201, 422, 422, 422, 422]
    for i, outcome in enumerate(outcomes[1:4], start=1):
        (error,) = outcome["problem"]["errors"]
        assert (error["type"], error["loc"]) == (
            "json_not_finite",
            ["body", "items", i, "input", "n"],
        )
    assert outcomes[4]["problem"]["errors"][0]["loc"] == ["body", "items", 4, "metadata", "m"]
    assert outcomes[0]["run"]["input"]["n"] == 12345678901234567890
    assert len(await run_keys(redis_client, prefix)) == 2  # the one run: record and stream


def _problem_of(answer: dict[str, Any]) -> dict[str, Any]:
    """A problem without what differs between two requests (the instance path)."""
    return {k: v for k, v in answer.items() if k != "instance"}


@pytest.mark.parametrize(
    "schema_invalid_item",
    [
        None,
        {**ECHO, "unknown_field": True},
        {**ECHO, "handler": "demo.echo\n"},
        {**ECHO, "idempotency_key": 5},
        {**ECHO, "metadata": ["not", "an", "object"]},
        {**ECHO, "queue": "has space"},
    ],
)
async def test_items_refused_for_what_is_in_them_get_the_single_creates_problem_in_place(
    api: httpx.AsyncClient,
    settings: Settings,
    redis_client: aioredis.Redis,
    prefix: str,
    schema_invalid_item: dict[str, Any] | None,
) -> None:
    """Items the request schema accepts but something else refuses (the handler's input
    model, the content rule, the size, a bound, the handler): in a batch whose every
    item fits the schema (judged in bulk, plain items without pydantic) and in one with
    a schema-invalid item (judged one by one; near-plain ones included), each bad item
    gets what POST /runs answers its body, errors and all, and the good ones around it
    are created."""
    bad: list[Any] = [
        {"handler": "demo.sleep", "input": {"seconds": "long"}},  # the handler's input model
        {**ECHO, "input": {"x": [1.5, float("inf")]}},  # non-finite, nested
        {**ECHO, "metadata": {"deep": nested(settings.max_input_depth)}},  # too deep
        {**ECHO, "input": {"message": "x" * settings.max_input_bytes}},  # too large
        {**ECHO, "queued_ttl_s": settings.queued_ttl_max_s * 2},  # past a bound
        {"handler": "no.such_handler", "input": {}},
        {**ECHO, "delay_s": settings.start_max_ahead_s * 2},
    ]
    if schema_invalid_item is not None:
        bad.append(schema_invalid_item)
    singles = [await post_json(api, "/runs", item) for item in bad]
    assert all(400 <= s.status_code < 500 for s in singles)
    assert await run_keys(redis_client, prefix) == []
    good = [{**ECHO, "input": {"message": f"good {i}"}} for i in range(len(bad) + 1)]
    items = [x for pair in zip(good, [*bad, None], strict=True) for x in pair if x is not None]

    outcomes = await post_batch(api, items)

    assert [o["status"] for o in outcomes[1::2]] == [s.status_code for s in singles]
    for i, (outcome, single) in enumerate(zip(outcomes[1::2], singles, strict=True)):
        expected = _problem_of(single.json())
        for error in expected.get("errors") or []:  # the body's: under the item's place
            if error["loc"][0] == "body":
                error["loc"] = ["body", "items", 2 * i + 1, *error["loc"][1:]]
        assert _problem_of(outcome["problem"]) == expected
    created = [o["run"] for o in outcomes[::2]]
    assert [o["status"] for o in outcomes[::2]] == [201] * len(good)
    assert [run["input"] for run in created] == [item["input"] for item in good]
    assert len(await run_keys(redis_client, prefix)) == 2 * len(good)


async def test_runs_asking_for_the_same_options_each_keep_their_own_and_others_theirs(
    api: httpx.AsyncClient,
) -> None:
    """Options resolved once for items that ask for the same ones are each run's own:
    what a read of every run gives, handler defaults and per-item options included."""
    items = [
        {**ECHO, "max_attempts": 3, "retention_s": 60.0, "priority": 2},
        {**ECHO, "max_attempts": 3, "retention_s": 60.0, "priority": 2, "idempotency_key": "k"},
        {**ECHO, "max_attempts": 3, "retention_s": 60.0, "priority": 3},
        {**ECHO, "metadata": {"team": "a"}, "budget": {"max_steps": 5}},
        {**ECHO, "metadata": {"team": "b"}, "run_at": "2020-01-01T00:00:00Z"},
        {"handler": "demo.sleep", "input": {"seconds": 1}},
    ]
    outcomes = await post_batch(api, items)
    assert [o["status"] for o in outcomes] == [201] * len(items)
    for outcome in outcomes:  # but the event id, not known at create
        fetched = (await api.get(f"/runs/{outcome['run']['id']}")).json()
        assert outcome["run"] == {**fetched, "last_event_id": None}
    runs = [o["run"] for o in outcomes]
    assert [run["priority"] for run in runs[:3]] == [2, 2, 3]
    assert [run["idempotency_key"] for run in runs[:2]] == [None, "k"]
    assert [run["metadata"] for run in runs[3:5]] == [{"team": "a"}, {"team": "b"}]
    assert {run["max_attempts"] for run in runs[:3]} == {3}
