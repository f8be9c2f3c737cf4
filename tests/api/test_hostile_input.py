"""Hostile ids, queue names, idempotency keys and JSON: a 4xx, and nothing written.

Every value that ends up in a Redis key name (run ids, queue names, idempotency
keys) or command (stream ids from ``Last-Event-ID``) is checked against a strict
character set and length at the API boundary, whichever way it arrives: path,
query, header or body. The hostile values aim at key injection (``{``/``}``
would move a key to another hash slot, ``*`` is a pattern, ``:`` a separator),
at logs (control characters), and at memory (length).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.keys import queue_of

ULID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}

HOSTILE_NAMES = [
    pytest.param("q" * 129, id="too-long"),
    pytest.param("q" * 50_000, id="very-long"),
    pytest.param("", id="empty"),
    pytest.param("{default}", id="hash-tag"),
    pytest.param("de}fa{ult", id="braces"),
    pytest.param("*", id="star"),
    pytest.param("a b", id="space"),
    pytest.param("a\nb", id="newline"),
    pytest.param("default\n", id="trailing-newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\x1b[31mb", id="escape-sequence"),
    pytest.param("a:b", id="key-separator"),
    pytest.param("ü", id="non-ascii"),
    pytest.param("../x", id="path-ish"),
]

# queue names are shorter than handler names (64 against 128 characters)
HOSTILE_QUEUE_NAMES = [*HOSTILE_NAMES, pytest.param("q" * 65, id="over-64")]

HOSTILE_RUN_IDS = [
    pytest.param(f"{{default}}.{ULID}", id="hash-tag-queue"),
    pytest.param(f"*.{ULID}", id="star-queue"),
    pytest.param(f"default.{ULID[:-1]}*", id="star-ulid"),
    pytest.param(f"de fault.{ULID}", id="space"),
    pytest.param(f"default.{ULID}\n", id="trailing-newline"),
    pytest.param(f"default.{ULID}\x00", id="nul"),
    pytest.param(f"default.{ULID}\x1b", id="escape"),
    pytest.param(f"{'q' * 65}.{ULID}", id="queue-too-long"),
    pytest.param(f"{'q' * 50_000}.{ULID}", id="very-long"),
    pytest.param(f"default.{ULID.lower()}", id="lowercase-ulid"),
    pytest.param("default", id="no-ulid"),
]

HOSTILE_IDEMPOTENCY_KEYS = [
    pytest.param("k" * 129, id="too-long"),
    pytest.param("k" * 50_000, id="very-long"),
    pytest.param("{tag}", id="hash-tag"),
    pytest.param("*", id="star"),
    pytest.param("a b", id="space"),
    pytest.param("a\tb", id="tab"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("key\n", id="trailing-newline"),
    pytest.param("ü", id="non-ascii"),
    pytest.param("", id="empty"),
]


async def keys_of(client: aioredis.Redis, prefix: str) -> list[str]:
    return sorted(await client.keys(f"{prefix}:*"))


def assert_refused(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert response.headers["content-type"] == "application/problem+json"


@pytest.fixture
async def untouched(redis_client: aioredis.Redis, prefix: str) -> aioredis.Redis:
    assert await keys_of(redis_client, prefix) == []
    return redis_client


HOSTILE_CURSORS = [
    pytest.param("c" * 257, id="too-long"),
    pytest.param("{*}", id="pattern-chars"),
    pytest.param("MTox", id="decodes-to-a-non-id"),
    pytest.param("MTpkZWZhdWx0LjAxQVJaM05ERUtUU1Y0UlJGRlE2OUc1RkFWCg", id="id-with-newline"),
]

HOSTILE_EVENT_IDS = [
    pytest.param("1-1\n", id="trailing-newline"),
    pytest.param("\u0661-1", id="non-ascii-digit"),
    pytest.param("99999999999999999999-1", id="over-64-bits"),
    pytest.param("1-*", id="star"),
    pytest.param("{1}-1", id="braces"),
    pytest.param("1 -1", id="space"),
    pytest.param("-1", id="no-ms"),
    pytest.param("1" * 65, id="too-long"),
]

Send = Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]


def in_path(method: str, template: str) -> Send:
    return lambda api, value: api.request(method, template.format(quote(value, safe="")))


def in_body(field: str) -> Send:
    return lambda api, value: api.post("/runs", json={**ECHO, field: value})


def in_query(name: str) -> Send:
    return lambda api, value: api.get("/runs", params={name: value})


def in_idempotency_header(api: httpx.AsyncClient, value: str) -> Awaitable[httpx.Response]:
    # raw bytes: what a client that skips validation would put on the wire
    return api.post("/runs", json=ECHO, headers=[(b"Idempotency-Key", value.encode())])


def in_last_event_id_header(api: httpx.AsyncClient, value: str) -> Awaitable[httpx.Response]:
    return api.get(f"/runs/default.{ULID}/events", headers=[(b"Last-Event-ID", value.encode())])


def in_last_event_id_query(api: httpx.AsyncClient, value: str) -> Awaitable[httpx.Response]:
    return api.get(f"/runs/default.{ULID}/events", params={"last_event_id": value})


# every way a value reaches a key name, a stream id or a filter through the API
ENTRY_POINTS: list[tuple[str, Send, list[Any]]] = [
    ("get-run", in_path("GET", "/runs/{}"), HOSTILE_RUN_IDS),
    ("cancel-run", in_path("POST", "/runs/{}/cancel"), HOSTILE_RUN_IDS),
    ("follow-run", in_path("GET", "/runs/{}/events"), HOSTILE_RUN_IDS),
    ("queue-field", in_body("queue"), HOSTILE_QUEUE_NAMES),
    ("queue-filter", in_query("queue"), HOSTILE_QUEUE_NAMES),
    ("handler-field", in_body("handler"), HOSTILE_NAMES),
    ("handler-filter", in_query("handler"), HOSTILE_NAMES),
    ("idempotency-field", in_body("idempotency_key"), HOSTILE_IDEMPOTENCY_KEYS),
    ("idempotency-header", in_idempotency_header, HOSTILE_IDEMPOTENCY_KEYS),
    ("cursor", in_query("cursor"), HOSTILE_CURSORS),
    ("last-event-id-header", in_last_event_id_header, HOSTILE_EVENT_IDS),
    ("last-event-id-query", in_last_event_id_query, HOSTILE_EVENT_IDS),
]


@pytest.mark.parametrize(
    ("send", "value"),
    [
        pytest.param(send, case.values[0], id=f"{where}-{case.id}")
        for where, send, cases in ENTRY_POINTS
        for case in cases
    ],
)
async def test_hostile_value_is_refused_and_nothing_is_written(
    api: httpx.AsyncClient, untouched: aioredis.Redis, prefix: str, send: Send, value: str
) -> None:
    response = await send(api, value)
    assert_refused(response)
    assert await keys_of(untouched, prefix) == []


def test_a_run_id_with_a_trailing_newline_names_no_queue() -> None:
    # Python's `$` matches before a final newline; ids must match in full
    assert queue_of(f"default.{ULID}") == "default"
    assert queue_of(f"default.{ULID}\n") is None


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


async def test_input_at_the_depth_limit_is_accepted(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    # {"deep": [[...]]}: the input object is one level, the lists the rest
    deepest = {"deep": nested(settings.max_input_depth - 1)}
    response = await api.post("/runs", json={"handler": "demo.echo", "input": deepest})
    assert response.status_code == 201
    assert response.json()["input"] == deepest


@pytest.mark.parametrize("field", ["input", "metadata"])
async def test_input_or_metadata_past_the_depth_limit_is_422(
    api: httpx.AsyncClient, untouched: aioredis.Redis, prefix: str, settings: Settings, field: str
) -> None:
    too_deep = {"a": nested(settings.max_input_depth)}
    response = await api.post("/runs", json={"handler": "demo.echo", field: too_deep})
    assert response.status_code == 422
    problem = response.json()
    assert problem["errors"][0]["loc"] == ["body", field]
    assert f"deeper than {settings.max_input_depth}" in problem["errors"][0]["msg"]
    assert await keys_of(untouched, prefix) == []


async def test_nesting_deep_enough_to_break_the_parser_is_422_not_500(
    api: httpx.AsyncClient, untouched: aioredis.Redis, prefix: str
) -> None:
    depth = 200_000
    body = b'{"handler":"demo.echo","input":' + b"[" * depth + b"]" * depth + b"}"
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert await keys_of(untouched, prefix) == []


@pytest.mark.parametrize(
    "raw_input",
    [
        pytest.param(b'{"message": "\\ud800"}', id="lone-surrogate"),
        pytest.param(b'{"\\udc00": 1}', id="lone-surrogate-key"),
        pytest.param(b'{"message": "\\uDBFF"}', id="lone-surrogate-upper-case"),
        pytest.param(b'{"message": "\xed\xa0\x80"}', id="lone-surrogate-as-utf8-bytes"),
        pytest.param(b'{"x": ' + b"9" * 5000 + b"}", id="huge-integer"),
        pytest.param(b'{"message": "\xff"}', id="invalid-utf8"),
    ],
)
async def test_json_that_cannot_be_stored_faithfully_is_400(
    api: httpx.AsyncClient, untouched: aioredis.Redis, prefix: str, raw_input: bytes
) -> None:
    body = b'{"handler":"demo.echo","input":' + raw_input + b"}"
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["detail"]
    assert await keys_of(untouched, prefix) == []


async def test_a_utf16_body_with_a_lone_surrogate_is_400(
    api: httpx.AsyncClient, untouched: aioredis.Redis, prefix: str
) -> None:
    # json.loads reads UTF-16 bodies too: a lone surrogate there has no UTF-8 form either
    text = '{"handler":"demo.echo","input":{"message":"\ud800"}}'
    body = text.encode("utf-16-le", "surrogatepass")
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert await keys_of(untouched, prefix) == []


async def test_a_surrogate_pair_is_ordinary_text(api: httpx.AsyncClient) -> None:
    body = b'{"handler":"demo.echo","input":{"message":"\\ud83d\\ude00"}}'
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 201
    assert response.json()["input"] == {"message": "\U0001f600"}


# one past what a Lua script holds exactly (2^53), past Redis's int64, and past 64 bits
PAST_SCRIPT_INT = [
    pytest.param(2**53, id="2^53"),
    pytest.param(2**63, id="2^63"),
    pytest.param(2**64, id="2^64"),
]
SCHEDULE = {"id": "nightly", "interval_s": 60, "run": ECHO}


def _integer_fields(n: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, body) with ``n`` in each integer a request body carries."""
    return [
        ("PATCH", "/schedules/nightly", {"version": n}),
        ("POST", "/schedules", {**SCHEDULE, "run": {**ECHO, "budget": {"max_steps": n}}}),
        ("POST", "/runs", {**ECHO, "budget": {"max_steps": n}}),
        ("POST", "/runs", {**ECHO, "priority": n}),
        ("POST", "/runs", {**ECHO, "max_attempts": n}),
        ("POST", "/runs/retry", {"limit": n}),
        ("POST", "/runs/purge", {"limit": n}),
        ("PUT", "/queues/default/limits", {"queue": n}),
        ("PUT", "/queues/default/limits", {"default_key": n}),
        ("PUT", "/queues/default/limits", {"handlers": {"demo.echo": n}}),
        ("PUT", "/queues/default/limits", {"keys": {"tenant-a": n}}),
        ("PUT", "/rate-limits/openai", {"limit": n}),
        ("PUT", "/rate-limits/openai", {"limit": 1, "burst": n}),
    ]


@pytest.mark.parametrize("n", PAST_SCRIPT_INT)
async def test_an_integer_past_2_53_anywhere_is_422_and_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings, n: int
) -> None:
    from tests.support.snapshots import changes, snapshot

    assert (await api.post("/schedules", json=SCHEDULE)).status_code == 201
    run_id = (await api.post("/runs", json=ECHO)).json()["id"]
    cases = [*_integer_fields(n), ("PATCH", f"/runs/{run_id}", {"priority": n})]
    for method, path, body in cases:
        before = await snapshot(redis_client, settings.prefix)
        response = await api.request(method, path, json=body)
        assert response.status_code == 422, (method, path, body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert not changes(before, await snapshot(redis_client, settings.prefix)), (path, body)
    batch = await api.post("/runs/batch", json={"items": [{**ECHO, "budget": {"max_steps": n}}]})
    assert batch.json()["items"][0]["status"] == 422, batch.text
    for query in (
        f"/runs?limit={n}",
        f"/schedules?limit={n}",
        f"/queues/default/series?minutes={n}",
    ):
        assert (await api.get(query)).status_code == 422, query


async def test_the_largest_schedule_version_is_a_stale_version_not_a_store_error(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.post("/schedules", json=SCHEDULE)).status_code == 201
    stale = await api.patch("/schedules/nightly", json={"version": 2**53 - 1, "paused": True})
    assert stale.status_code == 409, stale.text
    assert (await api.get("/schedules/nightly")).json()["paused"] is False
