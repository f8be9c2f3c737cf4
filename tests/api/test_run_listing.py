"""GET /runs returns summaries, large fields only when asked, and pages within a byte budget."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.api.app import create_app
from app.settings import Settings

BUDGET_BYTES = 8192


@pytest.fixture
async def tight_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An API whose list pages hold at most BUDGET_BYTES of runs."""
    app = create_app(settings.model_copy(update={"list_max_bytes": BUDGET_BYTES}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def create(api: httpx.AsyncClient, text: str = "hi", **extra: Any) -> str:
    body = {"handler": "demo.echo", "input": {"message": text}, **extra}
    response = await api.post("/runs", json=body)
    assert response.status_code == 201
    return str(response.json()["id"])


async def walk(api: httpx.AsyncClient, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a listing, following next_cursor to the end."""
    pages = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await api.get("/runs", params=query)
        assert response.status_code == 200
        page = response.json()
        pages.append(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


async def test_a_listing_returns_summaries_without_input_output_or_metadata(
    api: httpx.AsyncClient,
) -> None:
    run_id = await create(api, metadata={"who": "me"})
    item = (await api.get("/runs")).json()["items"][0]
    assert item["id"] == run_id and item["status"] == "queued" and item["handler"] == "demo.echo"
    assert {"input", "output", "metadata"}.isdisjoint(item)
    full = (await api.get(f"/runs/{run_id}")).json()
    assert full["input"] == {"message": "hi"} and full["metadata"] == {"who": "me"}


async def test_include_returns_the_large_fields_asked_for(api: httpx.AsyncClient) -> None:
    await create(api, metadata={"who": "me"})
    item = (await api.get("/runs", params={"include": "input,metadata"})).json()["items"][0]
    assert item["input"] == {"message": "hi"} and item["metadata"] == {"who": "me"}
    assert "output" not in item
    filtered = await api.get(
        "/runs", params={"include": "output", "status": "queued", "handler": "demo.echo"}
    )
    assert filtered.json()["items"][0]["output"] is None


async def test_include_given_twice_returns_both_fields(api: httpx.AsyncClient) -> None:
    await create(api, metadata={"who": "me"})
    response = await api.get("/runs", params=[("include", "input"), ("include", "metadata")])
    item = response.json()["items"][0]
    assert item["input"] == {"message": "hi"} and item["metadata"] == {"who": "me"}
    refused = await api.get("/runs", params=[("include", "input"), ("include", "state")])
    assert refused.status_code == 422


@pytest.mark.parametrize(
    "include", ["state", "input,bogus", "__all__", "id", "x" * 65], ids=lambda v: v[:10]
)
async def test_include_of_an_unknown_field_is_422(api: httpx.AsyncClient, include: str) -> None:
    response = await api.get("/runs", params={"include": include})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_a_page_stops_at_the_byte_budget_and_the_cursor_continues_exactly(
    tight_api: httpx.AsyncClient,
) -> None:
    ids = [await create(tight_api, text=f"{i}-" + "x" * 3000) for i in range(9)]
    pages = await walk(tight_api, include="input", limit=500)
    assert all(len(page) <= 2 for page in pages), [len(page) for page in pages]
    seen = [item["id"] for page in pages for item in page]
    assert seen == list(reversed(ids)), "every run once, newest first"
    assert all(item["input"]["message"].endswith("x" * 3000) for page in pages for item in page)
    # summaries are small: the same budget holds many of them on one page
    summaries = await walk(tight_api, limit=500)
    assert len(summaries) == 1 and len(summaries[0]) == 9


async def test_one_run_larger_than_the_budget_is_still_returned_alone(
    tight_api: httpx.AsyncClient,
) -> None:
    small = await create(tight_api)
    large = await create(tight_api, text="y" * (BUDGET_BYTES * 2))
    pages = await walk(tight_api, include="input")
    assert [[item["id"] for item in page] for page in pages] == [[large], [small]]


async def test_filters_page_across_the_budget_without_skipping_runs(
    tight_api: httpx.AsyncClient,
) -> None:
    wanted = []
    for i in range(12):
        if i % 3 == 0:
            wanted.append(
                await create(tight_api, text="z" * 3000, metadata={"i": i}, max_attempts=2)
            )
        else:
            await create(tight_api, text="z" * 3000)
    sleeper = {"handler": "demo.sleep", "input": {"seconds": 1}}
    assert (await tight_api.post("/runs", json=sleeper)).status_code == 201
    pages = await walk(tight_api, handler="demo.echo", include="input,metadata", limit=3)
    items = [item for page in pages for item in page]
    assert len(items) == 12
    assert [item["id"] for item in items if item["metadata"]] == list(reversed(wanted))
