"""POST/GET /runs and cancel: what a client sees, and that bad input writes nothing."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.leases.store import LeaseStore
from tests.support.polling import eventually

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


async def keys_of(client: aioredis.Redis, prefix: str) -> list[str]:
    return sorted(await client.keys(f"{prefix}:*"))


async def test_create_returns_201_with_location_and_a_queued_run(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs", json=ECHO)
    assert response.status_code == 201
    run = response.json()
    assert response.headers["location"] == f"/runs/{run['id']}"
    assert run["status"] == "queued"
    assert run["input"] == {"message": "hi"}
    assert run["id"].startswith("default.")
    fetched = (await api.get(f"/runs/{run['id']}")).json()
    assert fetched["status"] == "queued"
    assert fetched["created_at"] == run["created_at"]


async def test_create_refuses_json_sent_without_a_json_content_type(
    api: httpx.AsyncClient,
) -> None:
    """``curl -d`` labels its body as a form: 415, and the detail says what to send."""
    response = await api.post(
        "/runs",
        content=b'{"handler":"demo.sleep","input":{"seconds":1}}',
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    detail = response.json()["detail"]
    assert "application/x-www-form-urlencoded" in detail
    assert "Content-Type: application/json" in detail


async def test_idempotent_replay_returns_the_same_run_with_200(api: httpx.AsyncClient) -> None:
    first = await api.post("/runs", json=ECHO, headers={"Idempotency-Key": "order-42"})
    again = await api.post("/runs", json=ECHO, headers={"Idempotency-Key": "order-42"})
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


async def test_idempotency_key_as_a_body_field_works_like_the_header(
    api: httpx.AsyncClient,
) -> None:
    first = await api.post("/runs", json={**ECHO, "idempotency_key": "k1"})
    again = await api.post("/runs", json=ECHO, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]


async def test_same_idempotency_key_with_another_body_is_409(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    await api.post("/runs", json=ECHO, headers={"Idempotency-Key": "order-43"})
    before = await keys_of(redis_client, prefix)
    other = {"handler": "demo.echo", "input": {"message": "bye"}}
    response = await api.post("/runs", json=other, headers={"Idempotency-Key": "order-43"})
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert "different body" in response.json()["detail"]
    assert await keys_of(redis_client, prefix) == before


BAD_CREATES = [
    pytest.param({"handler": "no.such", "input": {}}, 422, "unknown handler", id="unknown-handler"),
    pytest.param(
        {"handler": "demo.sleep", "input": {"seconds": "soon"}},
        422,
        "invalid",
        id="input-fails-schema",
    ),
    pytest.param(
        {"handler": "demo.sleep", "input": {"seconds": -1}}, 422, "invalid", id="input-out-of-range"
    ),
    pytest.param({"input": {}}, 422, "", id="missing-handler"),
    pytest.param({"handler": "demo.echo", "queue": "bad queue{x}"}, 422, "", id="bad-queue"),
    pytest.param({"handler": "demo.echo", "max_attempts": 0}, 422, "", id="zero-attempts"),
    pytest.param({"handler": "demo.echo", "on_lease_expired": "explode"}, 422, "", id="bad-policy"),
    pytest.param({"handler": "demo.echo", "surprise": 1}, 422, "", id="unknown-field"),
    pytest.param([1, 2], 422, "", id="not-an-object"),
]


@pytest.mark.parametrize(("body", "status", "text"), BAD_CREATES)
async def test_bad_create_gets_a_problem_and_writes_nothing(
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    prefix: str,
    body: object,
    status: int,
    text: str,
) -> None:
    response = await api.post("/runs", json=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status
    assert text in (problem.get("detail", "") + problem["title"]).lower()
    assert await keys_of(redis_client, prefix) == []


async def test_malformed_json_is_400(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    response = await api.post(
        "/runs", content=b'{"handler": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["detail"]
    assert await keys_of(redis_client, prefix) == []


async def test_input_over_the_limit_is_413(
    api: httpx.AsyncClient, settings: Settings, redis_client: aioredis.Redis, prefix: str
) -> None:
    big = "x" * (settings.max_input_bytes + 10)
    response = await api.post("/runs", json={"handler": "demo.echo", "input": {"message": big}})
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert await keys_of(redis_client, prefix) == []


async def test_body_far_over_the_limit_is_refused_before_parsing(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    response = await api.post("/runs", content=b"x" * (settings.max_input_bytes * 2))
    assert response.status_code == 413
    assert response.json()["type"].endswith("/request-too-large")


async def test_header_and_field_idempotency_keys_that_differ_are_400(
    api: httpx.AsyncClient,
) -> None:
    response = await api.post(
        "/runs", json={**ECHO, "idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
    )
    assert response.status_code == 400


async def test_unknown_run_is_404_and_malformed_id_is_422(api: httpx.AsyncClient) -> None:
    missing = await api.get("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    malformed = await api.get("/runs/{lh}:*")
    assert malformed.status_code == 422


async def test_list_filters_and_pages_with_a_cursor(api: httpx.AsyncClient) -> None:
    created = [(await api.post("/runs", json=ECHO)).json()["id"] for _ in range(5)]
    sleeper = (
        await api.post("/runs", json={"handler": "demo.sleep", "input": {"seconds": 1}})
    ).json()["id"]
    assert (await api.put("/queues/mail")).status_code == 201
    other = (await api.post("/runs", json={**ECHO, "queue": "mail"})).json()["id"]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, "handler": "demo.echo", **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/runs", params=params)).json()
        seen.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([*created, other])
    assert seen.index(other) < seen.index(created[-1]), "newest first across queues"
    only_mail = (await api.get("/runs", params={"queue": "mail"})).json()["items"]
    assert [item["id"] for item in only_mail] == [other]
    queued = (await api.get("/runs", params={"status": "queued", "limit": 100})).json()["items"]
    assert sleeper in [item["id"] for item in queued]


async def test_bad_cursor_is_400(api: httpx.AsyncClient) -> None:
    response = await api.get("/runs", params={"cursor": "not-a-cursor"})
    assert response.status_code == 400


async def test_cancel_of_a_queued_run_is_202_and_idempotent(api: httpx.AsyncClient) -> None:
    run_id = (await api.post("/runs", json=ECHO)).json()["id"]
    first = await api.post(f"/runs/{run_id}/cancel")
    again = await api.post(f"/runs/{run_id}/cancel")
    assert first.status_code == again.status_code == 202
    assert first.json()["status"] == "cancelled"
    assert (await api.get(f"/runs/{run_id}")).json()["status"] == "cancelled"


async def test_cancel_of_an_unknown_run_is_404(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel")
    assert response.status_code == 404


async def test_handlers_publish_their_input_schema(api: httpx.AsyncClient) -> None:
    handlers = {item["name"]: item for item in (await api.get("/handlers")).json()}
    assert {"demo.echo", "demo.sleep", "demo.cpu", "demo.fail"} <= set(handlers)
    assert handlers["demo.sleep"]["input_schema"]["properties"]["seconds"]["type"] == "number"


async def test_handler_descriptions_are_plain_text_not_rst(api: httpx.AsyncClient) -> None:
    handlers = {item["name"]: item for item in (await api.get("/handlers")).json()}
    descriptions = [item["description"] or "" for item in handlers.values()]
    assert handlers["demo.sleep"]["description"].startswith("Sleep for seconds, emitting")
    assert [text for text in descriptions if "``" in text or ":class:`" in text] == []


async def test_readyz_reports_redis_scripts_and_eviction_policy(api: httpx.AsyncClient) -> None:
    body = (await api.get("/readyz")).json()
    assert body["status"] == "ready"
    assert body["scripts_loaded"] is True
    assert body["maxmemory_policy"] == "noeviction"


async def test_an_orphaned_run_reads_executor_lease_expired_with_its_evidence(
    api: httpx.AsyncClient, lease_store: LeaseStore
) -> None:
    run_id = (await api.post("/runs", json=ECHO)).json()["id"]
    claimed = (await lease_store.claim("default", "w-gone", 1)).runs
    assert [run.id for run in claimed] == [run_id]
    # nobody renews: once the test's 1 s lease runs out a reconciler pass orphans it
    await eventually(
        lambda: lease_store.reconcile("default"), until=bool, timeout_s=10, what="the orphan"
    )
    run = (await api.get(f"/runs/{run_id}")).json()
    assert run["status"] == "orphaned"
    error = run["error"]
    assert (error["code"], error["message"], error["retryable"]) == (
        "lease_expired",
        "executor lease expired",
        False,
    )
    details = error["details"]
    assert (details["owner_id"], details["fence"]) == ("w-gone", 1)
    assert details["detected_at_ms"] > details["lease_expires_at_ms"] > 0
    assert details["last_renewed_at_ms"] > 0
    listed = (await api.get("/runs", params={"status": "orphaned"})).json()["items"]
    assert [(item["id"], item["error"]) for item in listed] == [(run_id, error)]
