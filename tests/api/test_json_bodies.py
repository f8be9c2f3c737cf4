"""One body rule for every JSON endpoint: JSON label (415), finite numbers and bounded depth (422).

Each refusal is checked against the whole state under the test's prefix, read
before and after, so "the run is unchanged" covers its fence, status, the ready
list and its events at once.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.api.app import create_app
from app.models import RunStatus
from app.settings import Settings
from app.store.leases.store import LeaseStore, Outcome
from app.store.progress.store import ProgressStore
from app.store.runs.store import RunStore
from tests.support.reconciliation import park_on_unknown_effect
from tests.support.snapshots import changes, snapshot

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
NOT_JSON_LABELS = [
    pytest.param("text/plain", id="text-plain"),
    pytest.param("text/plain;charset=UTF-8", id="text-plain-charset"),
    pytest.param("application/x-www-form-urlencoded", id="form"),
    pytest.param("multipart/form-data; boundary=x", id="multipart"),
    pytest.param("application/jsonp", id="jsonp"),
    pytest.param("application/xml", id="xml"),
    pytest.param(None, id="no-content-type"),
]
# a value for the place a client's free JSON goes in each body, and how to wrap it
NON_FINITE = [
    pytest.param("1e400", id="1e400"),
    pytest.param("-1e400", id="minus-1e400"),
    pytest.param("NaN", id="nan"),
    pytest.param("Infinity", id="infinity"),
    pytest.param("-Infinity", id="minus-infinity"),
]


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


async def waiting_human(api: httpx.AsyncClient, lease_store: LeaseStore) -> str:
    """A run the watchdog escalated, as a worker would report it."""
    run_id: str = (await api.post("/runs", json=ECHO)).json()["id"]
    (claimed,) = (await lease_store.claim("default", "w-1", 1)).runs
    escalation = Outcome(claimed.lease, RunStatus.WAITING_HUMAN, output_json='{"reason":"x"}')
    await lease_store.finish_and_claim("default", "w-1", [escalation], 0)
    return run_id


def json_routes() -> list[tuple[str, str]]:
    """(method, path) of every operation that takes a request body, as the schema says.

    A route added later with a bare pydantic body parameter is listed too, and fails
    the 415 test below (FastAPI would 422 a text/plain body, or parse it): every body
    goes through app.api.bodies.json_body.
    """
    paths = create_app(Settings()).openapi()["paths"]
    return sorted(
        (method.upper(), path)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if "requestBody" in operation
    )


def test_the_json_endpoints_are_the_ones_documented_with_a_json_body() -> None:
    assert {path for _, path in json_routes()} >= {
        "/runs",
        "/runs/{run_id}/resume",
        "/runs/{run_id}/resolve",
        "/runs/purge",
    }
    paths = create_app(Settings()).openapi()["paths"]
    for method, path in json_routes():
        assert list(paths[path][method.lower()]["requestBody"]["content"]) == ["application/json"]


@pytest.mark.parametrize("label", NOT_JSON_LABELS)
@pytest.mark.parametrize(("method", "path"), json_routes())
async def test_a_body_not_labelled_json_is_415_and_changes_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    lease_store: LeaseStore,
    method: str,
    path: str,
    label: str | None,
) -> None:
    run_id = await waiting_human(api, lease_store)
    body = {"/runs": ECHO, "/runs/purge": {}}.get(path, {"input": 1, "action": "fail"})
    headers = {"content-type": label} if label else {}
    before = await snapshot(redis_client, settings.prefix)
    response = await api.request(
        method,
        path.replace("{run_id}", run_id),
        content=httpx.Request("POST", "http://x", json=body).content,
        headers=headers,
    )
    assert response.status_code == 415, response.text
    assert response.headers["content-type"] == "application/problem+json"
    detail = response.json()["detail"]
    assert (label.split(";")[0] if label else "no Content-Type") in detail
    assert "application/json" in detail
    assert not changes(before, await snapshot(redis_client, settings.prefix))


@pytest.mark.parametrize(
    "label",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.leasehold+json",
    ],
)
async def test_json_labels_with_parameters_and_suffixes_are_json(
    api: httpx.AsyncClient, label: str
) -> None:
    response = await api.post(
        "/runs", content=b'{"handler":"demo.echo","input":{}}', headers={"content-type": label}
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("content", "label", "status", "after"),
    [
        # no body and no label (curl -X POST): a resume without an input
        pytest.param(b"", None, 202, "queued", id="no-body"),
        pytest.param(b"", "application/json", 202, "queued", id="empty-json"),
        pytest.param(b'{"input": {"answer": 4.5}}', "application/json", 202, "queued", id="input"),
        # an empty body labelled as something else is still not JSON
        pytest.param(b"", "application/x-www-form-urlencoded", 415, "waiting_human", id="form"),
    ],
)
async def test_resume_bodies_that_may_be_left_out(
    api: httpx.AsyncClient,
    lease_store: LeaseStore,
    run_store: RunStore,
    content: bytes,
    label: str | None,
    status: int,
    after: str,
) -> None:
    run_id = await waiting_human(api, lease_store)
    headers = {"content-type": label} if label else {}
    response = await api.post(f"/runs/{run_id}/resume", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert (await run_store.get(run_id)).status == after


async def _bodies(
    api: httpx.AsyncClient,
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    value: str,
) -> list[tuple[str, str, list[Any]]]:
    """(path, raw body, where the value sits) for create, resume, resolve and purge."""
    resumable = await waiting_human(api, lease_store)
    parked = await park_on_unknown_effect(run_store, lease_store, progress)
    return [
        ("/runs", f'{{"handler":"demo.echo","input":{{"a":[1,{value}]}}}}', ["input", "a", 1]),
        (
            "/runs",
            f'{{"handler":"demo.echo","input":{{}},"metadata":{{"m":{value}}}}}',
            ["metadata", "m"],
        ),
        (
            "/runs",
            f'{{"handler":"demo.echo","input":{{}},"budget":{{"max_duration_s":{value}}}}}',
            ["budget", "max_duration_s"],
        ),
        ("/runs", f'{{"handler":"demo.echo","input":{{}},"retention_s":{value}}}', ["retention_s"]),
        (f"/runs/{resumable}/resume", f'{{"input":{{"x":{value}}}}}', ["input", "x"]),
        (f"/runs/{resumable}/resume", f'{{"input":{value}}}', ["input"]),
        (f"/runs/{parked.id}/resolve", f'{{"action":"succeed","output":[{value}]}}', ["output", 0]),
        (
            f"/runs/{parked.id}/resolve",
            f'{{"action":"retry","effect_outcome":"applied","effect_result":{value}}}',
            ["effect_result"],
        ),
        ("/runs/purge", f'{{"limit":{value}}}', ["limit"]),
    ]


@pytest.mark.parametrize("value", NON_FINITE)
async def test_non_finite_numbers_are_422_naming_where_and_change_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
    value: str,
) -> None:
    for path, body, where in await _bodies(api, run_store, lease_store, progress, value):
        before = await snapshot(redis_client, settings.prefix)
        response = await api.post(
            path, content=body.encode(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, (path, body, response.text)
        errors = response.json()["errors"]
        assert errors[0]["loc"] == ["body", *where], (path, errors)
        assert "not a finite number" in errors[0]["msg"]
        assert not changes(before, await snapshot(redis_client, settings.prefix)), (path, body)


async def test_a_thousand_levels_deep_is_422_everywhere_and_changes_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    run_store: RunStore,
    lease_store: LeaseStore,
    progress: ProgressStore,
) -> None:
    for path, body, _where in await _bodies(api, run_store, lease_store, progress, deep(1000)):
        before = await snapshot(redis_client, settings.prefix)
        response = await api.post(
            path, content=body.encode(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, (path, response.text[:300])
        assert not changes(before, await snapshot(redis_client, settings.prefix)), path


async def test_depth_up_to_the_limit_still_resumes(
    api: httpx.AsyncClient, lease_store: LeaseStore, settings: Settings
) -> None:
    run_id = await waiting_human(api, lease_store)
    body = f'{{"input":{deep(settings.max_input_depth)}}}'
    response = await api.post(
        f"/runs/{run_id}/resume",
        content=body.encode(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 202, response.text
    over = f'{{"input":{deep(settings.max_input_depth + 1)}}}'
    again = await waiting_human(api, lease_store)
    response = await api.post(
        f"/runs/{again}/resume", content=over.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "input"]


# one key twice: at the top, and three objects down (where an input or a batch item sits)
DUPLICATES = [
    pytest.param(b'{"input": 1, "input": 2}', "input", id="top"),
    pytest.param(b'{"items": [{"input": {"a": {"k": 1, "k": 2}}}]}', "k", id="nested"),
]


@pytest.mark.parametrize(("content", "key"), DUPLICATES)
@pytest.mark.parametrize(("method", "path"), json_routes())
async def test_a_key_named_twice_anywhere_is_422_naming_it_and_changes_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
    lease_store: LeaseStore,
    method: str,
    path: str,
    content: bytes,
    key: str,
) -> None:
    run_id = await waiting_human(api, lease_store)
    target = (
        path.replace("{run_id}", run_id)
        .replace("{schedule_id}", "nightly")
        .replace("{name}", "default")
        .replace("{key}", "crm")
    )
    before = await snapshot(redis_client, settings.prefix)
    response = await api.request(
        method, target, content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    (error,) = response.json()["errors"]
    assert (error["type"], error["loc"]) == ("json_duplicate_key", ["body"])
    assert repr(key) in error["msg"]
    assert not changes(before, await snapshot(redis_client, settings.prefix))


async def test_the_same_key_in_two_objects_is_no_duplicate(api: httpx.AsyncClient) -> None:
    body = (
        b'{"handler": "demo.echo", "input": {"a": {"k": 1}, "b": {"k": 2}}, "metadata": {"k": 3}}'
    )
    response = await api.post("/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["input"] == {"a": {"k": 1}, "b": {"k": 2}}
