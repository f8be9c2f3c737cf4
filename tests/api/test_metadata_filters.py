"""GET /runs?metadata.<key>=<value>: find runs by what their creator tagged them with."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis


async def create(api: httpx.AsyncClient, metadata: dict[str, Any]) -> str:
    body = {"handler": "demo.echo", "input": {}, "metadata": metadata}
    response = await api.post("/runs", json=body)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


async def listed(api: httpx.AsyncClient, **params: str) -> list[str]:
    response = await api.get("/runs", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def test_metadata_filters_keep_only_runs_with_every_pair(api: httpx.AsyncClient) -> None:
    acme_eu = await create(api, {"tenant": "acme", "region": "eu", "priority": 3})
    acme_us = await create(api, {"tenant": "acme", "region": "us", "vip": True})
    other = await create(api, {"tenant": "globex"})
    await create(api, {})
    assert await listed(api, **{"metadata.tenant": "acme"}) == [acme_us, acme_eu]
    assert await listed(api, **{"metadata.tenant": "acme", "metadata.region": "eu"}) == [acme_eu]
    assert await listed(api, **{"metadata.tenant": "globex"}) == [other]
    assert await listed(api, **{"metadata.priority": "3"}) == [acme_eu]  # numbers as JSON
    assert await listed(api, **{"metadata.vip": "true"}) == [acme_us]
    assert await listed(api, **{"metadata.tenant": "nobody"}) == []
    assert await listed(api, **{"metadata.tenant": "acme", "status": "succeeded"}) == []
    # the filter reads metadata; the summary still leaves it out unless asked
    items = (await api.get("/runs", params={"metadata.tenant": "globex"})).json()["items"]
    assert "metadata" not in items[0]
    asked = {"metadata.tenant": "globex", "include": "metadata"}
    assert (await api.get("/runs", params=asked)).json()["items"][0]["metadata"] == {
        "tenant": "globex"
    }


@pytest.mark.parametrize(
    "params",
    [
        {"metadata.": "x"},
        {"metadata.a b": "x"},
        {"metadata." + "k" * 65: "x"},
        {"metadata.{tag}": "x"},
        {"metadata.tenant": "v" * 257},
        {f"metadata.k{i}": "x" for i in range(9)},
    ],
    ids=["empty-key", "space", "long-key", "braces", "long-value", "nine-filters"],
)
async def test_hostile_metadata_filters_are_422_and_change_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, prefix: str, params: dict[str, str]
) -> None:
    await create(api, {"tenant": "acme"})
    before = sorted(await redis_client.keys(f"{prefix}:*"))
    response = await api.get("/runs", params=params)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "metadata" in response.json()["detail"]
    assert sorted(await redis_client.keys(f"{prefix}:*")) == before


async def test_a_repeated_metadata_key_is_422(api: httpx.AsyncClient) -> None:
    response = await api.get("/runs?metadata.tenant=a&metadata.tenant=b")
    assert response.status_code == 422
    assert "more than once" in response.json()["detail"]


async def test_a_metadata_filter_pages_through_many_runs_without_losing_one(
    api: httpx.AsyncClient,
) -> None:
    # more runs than one metadata read takes (8), each with a large metadata value (under
    # LEASEHOLD_MAX_METADATA_BYTES, 16 KiB)
    ids = [
        await create(api, {"tenant": "acme" if i % 3 == 0 else "globex", "blob": "x" * 15_000})
        for i in range(20)
    ]
    wanted = [run_id for i, run_id in enumerate(ids) if i % 3 == 0][::-1]
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        params = {"metadata.tenant": "acme", "limit": "3", **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/runs", params=params)).json()
        seen.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == wanted
