"""Namespaces: two tenants on one API and one Redis see and change only their own.

Every attack here is what a tenant holding a key of its own namespace tries against
another's objects, or what a careless admin sends to ``/namespaces``; each answer is
what a user observes (404 problem+json, 422, 429 naming the quota with Retry-After).
"""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from app.api.app import create_app
from app.settings import Settings
from tests.api.conftest import BOOTSTRAP

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


def admin(namespace: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {BOOTSTRAP}"}
    if namespace is not None:
        headers["Leasehold-Namespace"] = namespace
    return headers


def bearer(secret: str, namespace: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {secret}"}
    if namespace is not None:
        headers["Leasehold-Namespace"] = namespace
    return headers


@pytest.fixture
def api(keyed_api: httpx.AsyncClient) -> httpx.AsyncClient:
    return keyed_api


async def declare(api: httpx.AsyncClient, name: str, **quotas: int) -> None:
    answer = await api.put(f"/namespaces/{name}", json={"quotas": quotas}, headers=admin())
    assert answer.status_code in (200, 201), answer.text
    queue = await api.put("/queues/work", headers=admin(name))
    assert queue.status_code in (200, 201), queue.text


async def key_for(api: httpx.AsyncClient, namespace: str | None, role: str) -> str:
    body: dict[str, object] = {"name": f"{role}-{namespace}", "role": role}
    if namespace is not None:
        body["namespace"] = namespace
    answer = await api.post("/keys", json=body, headers=admin())
    assert answer.status_code == 201, answer.text
    secret: str = answer.json()["secret"]
    return secret


async def create(api: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    return await api.post("/runs", json={**ECHO, "queue": "work"}, headers=headers)


async def test_two_namespaces_hold_the_same_queue_name_apart(api: httpx.AsyncClient) -> None:
    await declare(api, "acme")
    await declare(api, "bravo")
    a = await create(api, admin("acme"))
    b = await create(api, admin("bravo"))
    assert a.status_code == b.status_code == 201, (a.text, b.text)
    a_id, b_id = a.json()["id"], b.json()["id"]

    listed_a = (await api.get("/runs", headers=admin("acme"))).json()["items"]
    listed_b = (await api.get("/runs", headers=admin("bravo"))).json()["items"]
    assert [run["id"] for run in listed_a] == [a_id]
    assert [run["id"] for run in listed_b] == [b_id]
    # the default namespace (no header) has neither, nor the queue
    assert (await api.get("/runs", headers=admin())).json()["items"] == []
    assert (await api.get(f"/runs/{a_id}", headers=admin())).status_code == 404
    assert (await api.get(f"/runs/{a_id}", headers=admin("bravo"))).status_code == 404
    assert (await api.get(f"/runs/{a_id}", headers=admin("acme"))).status_code == 200


async def test_a_bound_key_reaches_its_namespace_only(api: httpx.AsyncClient) -> None:
    await declare(api, "acme")
    await declare(api, "bravo")
    a_id = (await create(api, admin("acme"))).json()["id"]
    bravo = await key_for(api, "bravo", "operate")

    # no header: its own namespace; the other's run is a 404 like any unknown id
    assert (await create(api, bearer(bravo))).status_code == 201
    missing = await api.get(f"/runs/{a_id}", headers=bearer(bravo))
    assert missing.status_code == 404
    cancel = await api.post(f"/runs/{a_id}/cancel", headers=bearer(bravo))
    assert cancel.status_code == 404
    # naming the other namespace is the same 404 as naming one that does not exist
    for name in ("acme", "nosuch"):
        answer = await api.get("/runs", headers=bearer(bravo, name))
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"].endswith("namespace-not-found")
    assert (await api.get(f"/runs/{a_id}", headers=admin("acme"))).json()["status"] == "queued"


async def test_an_unknown_or_malformed_namespace_header_is_404(api: httpx.AsyncClient) -> None:
    for name in ("nosuch", "UPPER", "../x", "a" * 500, ""):
        answer = await api.get("/runs", headers=admin(name))
        if name == "":
            assert answer.status_code == 200  # an empty header names nothing: the default
            continue
        assert answer.status_code == 404, name
        assert answer.json()["type"].endswith("namespace-not-found")


async def test_without_keys_the_header_still_names_the_namespace(settings: Settings) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            assert (await api.put("/namespaces/acme", json={})).status_code == 201
            assert (
                await api.put("/queues/work", headers={"Leasehold-Namespace": "acme"})
            ).is_success
            made = await api.post(
                "/runs", json={**ECHO, "queue": "work"}, headers={"Leasehold-Namespace": "acme"}
            )
            assert made.status_code == 201
            assert (await api.get(f"/runs/{made.json()['id']}")).status_code == 404


HOSTILE_SPECS = [
    pytest.param({"quotas": {"live_runs": -1}}, id="negative"),
    pytest.param({"quotas": {"live_runs": 2**70}}, id="huge"),
    pytest.param({"quotas": {"creates_per_s": 1.5}}, id="fractional-rate"),
    pytest.param({"quotas": {"live_run": 5}}, id="unknown-quota"),
    pytest.param({"quota": {}}, id="unknown-field"),
    pytest.param({"quotas": []}, id="not-an-object"),
    pytest.param({"quotas": {"stored_bytes": "1e400"}}, id="non-finite-text"),
]


@pytest.mark.parametrize("body", HOSTILE_SPECS)
async def test_hostile_namespace_specs_are_422_and_change_nothing(
    api: httpx.AsyncClient, body: object
) -> None:
    answer = await api.put("/namespaces/acme", json=body, headers=admin())
    assert answer.status_code == 422, answer.text
    assert (await api.get("/namespaces/acme", headers=admin())).status_code == 404


@pytest.mark.parametrize("name", ["UPPER", "-lead", "a" * 33, "sp ace", "default%2F..%2Fx"])
async def test_a_malformed_namespace_name_is_422(api: httpx.AsyncClient, name: str) -> None:
    answer = await api.put(f"/namespaces/{name}", json={}, headers=admin())
    assert answer.status_code in (404, 422), answer.text
    names = [
        item["name"] for item in (await api.get("/namespaces", headers=admin())).json()["items"]
    ]
    assert names == ["default"]


async def test_put_get_list_and_delete_a_namespace(
    api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    first = await api.put("/namespaces/acme", json={"quotas": {"live_runs": 5}}, headers=admin())
    assert first.status_code == 201 and first.headers["location"] == "/namespaces/acme"
    again = await api.put("/namespaces/acme", json={"quotas": {"queues": 2}}, headers=admin())
    assert again.status_code == 200
    assert again.json()["quotas"] == {
        "queues": 2,
        "live_runs": None,
        "stored_bytes": None,
        "creates_per_s": None,
        "schedules": None,
        "signals_per_s": None,
        "listings_in_flight": None,
    }
    await api.put("/queues/work", headers=admin("acme"))
    shown = (await api.get("/namespaces/acme", headers=admin())).json()
    assert shown["usage"]["queues"] == 1 and shown["usage"]["live_runs"] == 0
    listed = (await api.get("/namespaces", headers=admin())).json()["items"]
    assert [item["name"] for item in listed] == ["default", "acme"]

    busy = await api.delete("/namespaces/acme", headers=admin())
    assert busy.status_code == 409 and busy.json()["type"].endswith("namespace-not-empty")
    assert (await api.delete("/queues/work", headers=admin("acme"))).status_code == 204
    assert "acme" in keyed_app.state.leasehold.namespaced
    assert (await api.delete("/namespaces/acme", headers=admin())).status_code == 204
    # its stores and feeds are dropped with it: deleting namespaces frees what they held
    assert "acme" not in keyed_app.state.leasehold.namespaced
    assert (await api.get("/runs", headers=admin("acme"))).status_code == 404
    assert (await api.delete("/namespaces/acme", headers=admin())).status_code == 404


async def test_past_max_namespaces_a_put_is_409(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"api_keys": [BOOTSTRAP], "max_namespaces": 2}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            for name in ("one", "two"):
                assert (
                    await api.put(f"/namespaces/{name}", json={}, headers=admin())
                ).status_code == 201
            third = await api.put("/namespaces/three", json={}, headers=admin())
            assert third.status_code == 409
            # default is never counted: giving it quotas still works
            assert (await api.put("/namespaces/default", json={}, headers=admin())).is_success


async def test_a_tenant_reads_its_own_namespace_and_no_other(api: httpx.AsyncClient) -> None:
    await declare(api, "acme", live_runs=3)
    await declare(api, "bravo")
    reader = await key_for(api, "acme", "read")
    own = await api.get("/namespaces/acme", headers=bearer(reader))
    assert own.status_code == 200 and own.json()["quotas"]["live_runs"] == 3
    assert (await api.get("/namespaces/bravo", headers=bearer(reader))).status_code == 404
    assert (await api.get("/namespaces", headers=bearer(reader))).status_code == 403
    assert (await api.put("/namespaces/acme", json={}, headers=bearer(reader))).status_code == 403


def assert_quota_refusal(answer: httpx.Response, quota: str) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert int(answer.headers["retry-after"]) >= 1
    body = answer.json()
    assert body["type"].endswith("quota-exceeded")
    assert body["quota"] == quota and body["namespace"] == "acme"


async def test_live_runs_quota_is_429_naming_it(api: httpx.AsyncClient) -> None:
    await declare(api, "acme", live_runs=2)
    await declare(api, "bravo", live_runs=2)
    for _ in range(2):
        assert (await create(api, admin("acme"))).status_code == 201
    assert_quota_refusal(await create(api, admin("acme")), "live_runs")
    # a batch that would pass it is refused whole
    batch = await api.post(
        "/runs/batch", json={"items": [{**ECHO, "queue": "work"}]}, headers=admin("acme")
    )
    assert_quota_refusal(batch, "live_runs")
    # the other tenant is not touched by acme's quota
    assert (await create(api, admin("bravo"))).status_code == 201
    assert len((await api.get("/runs", headers=admin("acme"))).json()["items"]) == 2


async def test_creates_per_second_quota_is_429_with_retry_after(api: httpx.AsyncClient) -> None:
    await declare(api, "acme", creates_per_s=3)
    answers = [await create(api, admin("acme")) for _ in range(6)]
    made = [answer for answer in answers if answer.status_code == 201]
    refused = [answer for answer in answers if answer.status_code == 429]
    # a burst of one second's worth passes; in six quick creates at least two are refused
    assert 3 <= len(made) <= 4 and len(made) + len(refused) == 6
    assert_quota_refusal(refused[0], "creates_per_s")
    too_big = await api.post(
        "/runs/batch", json={"items": [{**ECHO, "queue": "work"}] * 4}, headers=admin("acme")
    )
    assert_quota_refusal(too_big, "creates_per_s")


async def test_stored_bytes_quota_refuses_creates_once_passed(settings: Settings) -> None:
    app = create_app(
        settings.model_copy(update={"api_keys": [BOOTSTRAP], "quota_usage_ttl_s": 0.05})
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            await declare(api, "acme", stored_bytes=1)
            # the first create finds an empty namespace; once it exists, acme holds bytes
            assert (await create(api, admin("acme"))).status_code == 201
            shown = (await api.get("/namespaces/acme", headers=admin())).json()
            assert shown["usage"]["stored_bytes"] > 1
            assert_quota_refusal(await create(api, admin("acme")), "stored_bytes")


async def test_queue_and_schedule_quotas_are_429_naming_them(api: httpx.AsyncClient) -> None:
    await declare(api, "acme", queues=1, schedules=1)
    assert_quota_refusal(await api.put("/queues/second", headers=admin("acme")), "queues")
    assert (await api.put("/queues/work", headers=admin("acme"))).status_code == 200  # exists
    schedule = {"id": "one", "cron": "30 2 * * *", "run": {**ECHO, "queue": "work"}}
    assert (await api.post("/schedules", json=schedule, headers=admin("acme"))).status_code == 201
    again = await api.post("/schedules", json={**schedule, "id": "two"}, headers=admin("acme"))
    assert_quota_refusal(again, "schedules")
    # the default namespace keeps the deployment's own bounds
    assert (await api.put("/queues/second", headers=admin())).status_code == 201


async def test_signals_quota_is_429_naming_it(api: httpx.AsyncClient) -> None:
    await declare(api, "acme", signals_per_s=2)
    run_id = (await create(api, admin("acme"))).json()["id"]
    answers = [
        await api.post(f"/runs/{run_id}/signals/go", json={"payload": 1}, headers=admin("acme"))
        for _ in range(5)
    ]
    assert [answer.status_code for answer in answers].count(429) >= 2
    assert_quota_refusal(next(a for a in answers if a.status_code == 429), "signals_per_s")


async def test_audit_entries_name_the_namespace(
    api: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    await declare(api, "acme")
    entries = (await api.get("/audit", headers=admin())).json()["items"]
    by_path = {(entry["method"], entry["path"]): entry["namespace"] for entry in entries}
    assert by_path[("PUT", "/queues/work")] == "acme"
    assert by_path[("PUT", "/namespaces/acme")] == "default"


async def test_a_stream_token_reads_its_namespace_run_without_a_header(
    api: httpx.AsyncClient,
) -> None:
    await declare(api, "acme")
    run_id = (await create(api, admin("acme"))).json()["id"]
    await api.post(f"/runs/{run_id}/cancel", headers=admin("acme"))
    token = (await api.post(f"/runs/{run_id}/stream-token", headers=admin("acme"))).json()["token"]
    events = await api.get(f"/runs/{run_id}/events?access_token={token}")
    assert events.status_code == 200 and "cancelled" in events.text
    # it does not let the page name another namespace
    other = await api.get(
        f"/runs/{run_id}/events?access_token={token}", headers={"Leasehold-Namespace": "default"}
    )
    assert other.status_code == 404


def sample(text: str, series: str) -> float:
    """One sample's value in an exposition; 0 when absent (a counter not touched yet)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


ACME_CREATED = 'leasehold_runs_created_total{handler="demo.echo",queue="acme/work"}'
WORK_CREATED = 'leasehold_runs_created_total{handler="demo.echo",queue="work"}'


async def test_metrics_label_each_namespace_s_queues_apart(api: httpx.AsyncClient) -> None:
    await declare(api, "acme")
    await api.put("/queues/work", headers=admin())
    # counters are the process's, and earlier tests of this session count too
    before = (await api.get("/metrics", headers=admin())).text
    assert (await create(api, admin("acme"))).status_code == 201
    for _ in range(2):
        assert (await create(api, admin())).status_code == 201
    acme = (await api.get("/metrics", headers=admin("acme"))).text
    assert 'leasehold_queue_depth{queue="acme/work",state="ready"} 1.0' in acme
    mine = (await api.get("/metrics", headers=admin())).text
    assert 'leasehold_queue_depth{queue="work",state="ready"} 2.0' in mine
    # the default namespace's scrape keeps acme's counter: it is acme's to forget
    assert sample(mine, ACME_CREATED) - sample(before, ACME_CREATED) == 1
    assert sample(mine, WORK_CREATED) - sample(before, WORK_CREATED) == 2
    # a key of one namespace may not read the process's series of every namespace
    reader = await key_for(api, "acme", "read")
    refused = await api.get("/metrics", headers=bearer(reader))
    assert refused.status_code == 403 and "every namespace" in refused.json()["detail"]


async def test_past_a_rate_quota_the_next_create_is_refused_before_it_is_read(
    api: httpx.AsyncClient,
) -> None:
    await declare(api, "acme", creates_per_s=1)
    assert (await create(api, admin("acme"))).status_code == 201
    assert_quota_refusal(await create(api, admin("acme")), "creates_per_s")
    # refused from memory until a token is due: not even the body is read
    unread = await api.post(
        "/runs", content=b"{not json", headers={**admin("acme"), "content-type": "text/plain"}
    )
    assert_quota_refusal(unread, "creates_per_s")
    # another namespace, and reads of acme, are not refused
    assert (await api.get("/runs", headers=admin("acme"))).status_code == 200
    assert (await api.post("/runs", content=b"{", headers=admin())).status_code in (415, 422)


async def test_listings_in_flight_quota_refuses_one_more(
    api: httpx.AsyncClient, keyed_app: FastAPI
) -> None:
    await declare(api, "acme", listings_in_flight=1)
    guard = keyed_app.state.leasehold.for_namespace("acme").quota
    assert (await api.get("/runs", headers=admin("acme"))).status_code == 200
    async with guard.listing():  # one listing in flight in this process
        assert_quota_refusal(await api.get("/runs", headers=admin("acme")), "listings_in_flight")
        assert (await api.get("/runs", headers=admin())).status_code == 200
    assert (await api.get("/runs", headers=admin("acme"))).status_code == 200


async def test_reading_a_namespace_s_usage_measures_it_once_per_ttl(
    api: httpx.AsyncClient,
) -> None:
    """A tenant asking for its usage in a loop cannot make the API read every queue of
    the namespace each time: the measurement is shared for LEASEHOLD_QUOTA_USAGE_TTL_S."""
    await declare(api, "acme")
    reader = await key_for(api, "acme", "read")
    shown = [
        (await api.get("/namespaces/acme", headers=bearer(reader))).json()["usage"]
        for _ in range(5)
    ]
    assert len({usage["measured_at"] for usage in shown}) == 1
