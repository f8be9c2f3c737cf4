"""GET /activity against a real uvicorn server: start at "now", resume by cursor, refuse junk.

(SSE needs a real server: the in-process ASGI transport buffers whole bodies.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from tests.support.processes import Processes


async def messages(
    http: httpx.AsyncClient, *, count: int, headers: dict[str, str] | None = None, query: str = ""
) -> list[dict[str, str]]:
    """The first ``count`` SSE messages of /activity (keep-alive comments skipped)."""
    found: list[dict[str, str]] = []
    async with http.stream("GET", f"/activity{query}", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for message in parse(response.aiter_lines()):
            found.append(message)
            if len(found) == count:
                break
    return found


async def parse(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    current: dict[str, str] = {}
    async for line in lines:
        if not line:
            if current:
                yield current
            current = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")


async def create(http: httpx.AsyncClient, queue: str = "default") -> str:
    response = await http.post("/runs", json={"handler": "demo.echo", "queue": queue})
    run_id: str = response.json()["id"]
    return run_id


async def test_a_new_follower_gets_ready_first_and_resumes_from_any_message(
    processes: Processes,
) -> None:
    _, url = processes.api()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        first = await create(http)  # the queue exists before the stream starts
        async with http.stream("GET", "/activity") as response:
            stream = parse(response.aiter_lines())
            ready = await anext(stream)
            assert ready["event"] == "ready"
            assert json.loads(ready["data"]) == {"queues": ["default"]}
            second = await create(http)
            created = await anext(stream)
        assert created["event"] == "activity"
        entry = json.loads(created["data"])
        assert (entry["run_id"], entry["type"], entry["status"]) == (second, "created", "queued")
        assert created["id"].startswith("default@")
        # missed while disconnected: a cancel of the first run and a run on a new queue
        await http.post(f"/runs/{first}/cancel")
        assert (await http.put("/queues/mail")).status_code == 201
        third = await create(http, queue="mail")
        resumed = await messages(http, count=2, headers={"Last-Event-ID": created["id"]})
    seen = [(json.loads(m["data"])["run_id"], json.loads(m["data"])["type"]) for m in resumed]
    assert seen == [(first, "cancelled"), (third, "created")]
    assert resumed[-1]["id"].startswith("default@") and ",mail@" in resumed[-1]["id"]


async def test_a_queue_filter_follows_only_that_queue(processes: Processes) -> None:
    _, url = processes.api()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        # only a declared queue can be followed
        assert (await http.put("/queues/mail")).status_code == 201
        async with http.stream("GET", "/activity?queue=mail") as response:
            stream = parse(response.aiter_lines())
            assert (await anext(stream))["event"] == "ready"
            await create(http, queue="default")
            mail = await create(http, queue="mail")
            entry = json.loads((await anext(stream))["data"])
    assert (entry["queue"], entry["run_id"]) == ("mail", mail)


async def test_malformed_cursors_and_queue_names_are_400_before_the_stream(
    processes: Processes,
) -> None:
    _, url = processes.api()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        bad_cursor = await http.get("/activity", headers={"Last-Event-ID": "default@nope"})
        bad_queue = await http.get("/activity?queue=no%20spaces")
    for response in (bad_cursor, bad_queue):
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
