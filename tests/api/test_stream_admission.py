"""What a stream request is refused before anything is opened: made-up queues, cursors
past the end, a full Redis pool. In-process (no stream body is read: each answer
comes before the 200), on the session's real Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI

from app.api.app import create_app
from app.api.state import ApiState
from app.settings import Settings
from app.store.redis.connection import PoolExhausted, async_client

LAST_ID = "18446744073709551615-18446744073709551615"


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield app, client


def assert_problem(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    return body


async def test_made_up_queues_are_422_and_open_no_reader(settings: Settings) -> None:
    async with serving(settings) as (app, api):
        await api.post("/runs", json={"handler": "demo.echo", "input": {}})  # "default" is declared
        names = "&".join(f"queue=made-up-{index}" for index in range(100))
        responses = await asyncio.gather(*(api.get(f"/activity?{names}") for _ in range(11)))
        for response in responses:
            body = assert_problem(response, 422)
            assert body["type"] == "https://leasehold.dev/problems/queue-not-declared"
            assert "'made-up-0' is not declared" in str(body["detail"])
        mixed = await api.get("/activity?queue=default&queue=made-up")
        assert "'made-up' is not declared" in str(assert_problem(mixed, 422)["detail"])
        state: ApiState = app.state.leasehold
        assert state.activity.readers == 0
        assert state.slots.taken == 0


async def test_more_queues_than_one_request_may_follow_is_400(settings: Settings) -> None:
    async with serving(settings.model_copy(update={"activity_max_queues": 3})) as (_, api):
        names = "&".join(f"queue=q{index}" for index in range(4))
        assert_problem(await api.get(f"/activity?{names}"), 400)


@pytest.mark.parametrize("last", [LAST_ID, "018446744073709551615-18446744073709551615"])
async def test_a_last_event_id_with_nothing_after_it_is_400(
    api: httpx.AsyncClient, last: str
) -> None:
    run_id = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()["id"]
    assert_problem(await api.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": last}), 400)
    assert_problem(await api.get(f"/runs/{run_id}/events", params={"last_event_id": last}), 400)
    cursor = await api.get("/activity", headers={"Last-Event-ID": f"default@{last}"})
    assert_problem(cursor, 400)


async def test_a_full_pool_is_a_503_with_retry_after_within_its_wait_then_serves_again(
    settings: Settings,
) -> None:
    bounded = settings.model_copy(update={"redis_max_connections": 1, "redis_pool_timeout_s": 0.2})
    async with serving(bounded) as (app, api):
        state: ApiState = app.state.leasehold
        holder = asyncio.create_task(state.client.blpop([f"{settings.prefix}:nothing"], timeout=1))
        await asyncio.sleep(0.1)  # the BLPOP holds the pool's only connection
        response = await asyncio.wait_for(api.get("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV"), 10)
        body = assert_problem(response, 503)
        assert body["type"] == "https://leasehold.dev/problems/store-busy"
        assert response.headers["Retry-After"] == "1"
        await holder
        assert (await api.get("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV")).status_code == 404


async def test_a_pool_wait_that_times_out_says_so(redis_url: str) -> None:
    client = async_client(redis_url, max_connections=1, pool_timeout_s=0.1)
    try:
        holder = asyncio.create_task(client.blpop(["lh-test:nothing"], timeout=1))
        await asyncio.sleep(0.1)
        with pytest.raises(PoolExhausted):
            await client.ping()
        await holder
        assert await client.ping()
    finally:
        await client.aclose()
