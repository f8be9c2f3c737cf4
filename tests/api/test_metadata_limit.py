"""LEASEHOLD_MAX_METADATA_BYTES: every path that writes a run's metadata refuses it past the bound.

Issue 35: metadata had no bound of its own (only the body's), and each listing that
filters by it reads it back from Redis. Each attack below sends metadata one byte
over the bound on one write path and finds a 422 problem naming the setting, and
nothing written; metadata exactly at the bound is taken. (``ctx.spawn``: the hostile
spawns of ``tests/process/test_children.py``; a re-run copies the metadata its run
was created with, judged then, and takes none of its own.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.store.codec import dumps
from tests.api.conftest import api_with

LIMIT = 1024
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


def metadata_of(size: int) -> dict[str, Any]:
    """Metadata whose compact JSON is exactly ``size`` bytes (non-ASCII: bytes, not chars)."""
    base = {"tenant": "é", "pad": ""}
    pad = size - len(dumps(base).encode())
    metadata = {**base, "pad": "x" * pad}
    assert len(dumps(metadata).encode()) == size
    return metadata


OVER = metadata_of(LIMIT + 1)
AT = metadata_of(LIMIT)


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An API whose runs may carry at most LIMIT bytes of metadata."""
    async with api_with(settings, max_metadata_bytes=LIMIT) as client:
        yield client


async def keys_of(client: aioredis.Redis, prefix: str) -> list[str]:
    return sorted(await client.keys(f"{prefix}:*"))


def assert_names_the_limit(problem: dict[str, Any]) -> None:
    assert problem["status"] == 422
    assert "LEASEHOLD_MAX_METADATA_BYTES" in problem["detail"], problem
    assert f"{LIMIT + 1} bytes" in problem["detail"] and str(LIMIT) in problem["detail"]


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
async def test_a_create_with_metadata_over_the_bound_is_422_and_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, accept: str
) -> None:
    before = await keys_of(redis_client, prefix)

    response = await api.post("/runs", json={**ECHO, "metadata": OVER}, headers={"accept": accept})

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert_names_the_limit(response.json())
    assert await keys_of(redis_client, prefix) == before
    taken = await api.post("/runs", json={**ECHO, "metadata": AT})
    assert taken.status_code == 201 and taken.json()["metadata"] == AT


async def test_a_batch_item_with_metadata_over_the_bound_is_refused_in_its_place(
    api: httpx.AsyncClient,
) -> None:
    items = [
        {**ECHO, "metadata": AT},
        {**ECHO, "metadata": OVER},  # a plain item: the fast path judges it
        {**ECHO, "metadata": OVER, "priority": 1},  # an item pydantic validates
        {**ECHO, "metadata": {"n": 1}},
    ]

    response = await api.post("/runs/batch", json={"items": items})

    outcomes = response.json()["items"]
    assert [outcome["status"] for outcome in outcomes] == [201, 422, 422, 201]
    for outcome in outcomes[1:3]:
        assert_names_the_limit(outcome["problem"])
        assert "run" not in outcome
    listed = (await api.get("/runs", params={"include": "metadata"})).json()["items"]
    assert [run["metadata"] for run in listed] == [{"n": 1}, AT]


async def test_a_schedule_whose_run_carries_metadata_over_the_bound_is_refused(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    before = await keys_of(redis_client, prefix)
    schedule = {"id": "tagged", "interval_s": 3600, "run": {**ECHO, "metadata": OVER}}

    created = await api.post("/schedules", json=schedule)

    assert created.status_code == 422, created.text
    assert_names_the_limit(created.json())
    assert await keys_of(redis_client, prefix) == before
    assert (await api.post("/schedules", json={**schedule, "run": ECHO})).status_code == 201
    changed = await api.patch("/schedules/tagged", json={"run": {**ECHO, "metadata": OVER}})
    assert changed.status_code == 422, changed.text
    assert_names_the_limit(changed.json())
    kept = (await api.get("/schedules/tagged")).json()
    assert kept["version"] == 1 and kept["run"].get("metadata") is None
    fired = await api.post("/schedules/tagged/trigger")
    [run_id] = fired.json()["created"]
    assert (await api.get(f"/runs/{run_id}")).json()["metadata"] == {}


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/runs/{id}/retry"), ("PATCH", "/runs/{id}")]
)
async def test_no_other_write_of_a_run_takes_metadata(
    api: httpx.AsyncClient, method: str, path: str
) -> None:
    # a re-run copies its run's metadata (bounded when that run was created); neither it
    # nor a PATCH of a waiting run may bring metadata of its own
    run_id = (await api.post("/runs", json={**ECHO, "metadata": AT})).json()["id"]

    response = await api.request(method, path.format(id=run_id), json={"metadata": OVER})

    assert response.status_code == 422, response.text
    assert ["body", "metadata"] in [error["loc"] for error in response.json()["errors"]]
    assert (await api.get(f"/runs/{run_id}")).json()["metadata"] == AT
