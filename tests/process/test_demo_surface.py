"""The demo is off unless asked for, and never a way to make a worker call a host a client chose.

Real API and worker processes on the session's Redis. The attack as the issue
wrote it: ``demo.agent`` with a client-chosen ``model_url`` pointing at a
listener we own, on an API that requires keys and a worker that holds one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from app.client import AsyncClient
from app.models import RunStatus
from tests.support.processes import Processes

KEY = "demo-surface-key-0123456789"
PRODUCTION_HANDLERS = "tests.support.handlers"


class Listener:
    """A TCP server on loopback that records every connection and what it was sent."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.received.append(await asyncio.wait_for(reader.read(65_536), timeout=5))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nstolen")
            await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    """Where an attacker would like the worker to send its requests."""
    recorder = Listener()
    server = await asyncio.start_server(recorder._serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    recorder.url = f"http://127.0.0.1:{port}/v1/chat"
    async with server:
        yield recorder


async def test_a_worker_without_handlers_says_so_in_one_line_and_exits_2(
    processes: Processes,
) -> None:
    worker = processes.worker(LEASEHOLD_HANDLERS="")
    assert worker.wait(timeout_s=60) == 2
    lines = [line for line in worker.log().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "LEASEHOLD_HANDLERS" in lines[0]
    assert "no handlers" in lines[0]


async def test_a_production_api_refuses_the_ssrf_run_and_serves_no_demo(
    processes: Processes, listener: Listener
) -> None:
    _, url = processes.api(LEASEHOLD_HANDLERS=PRODUCTION_HANDLERS)
    attack = {"handler": "demo.agent", "input": {"model_url": listener.url}}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        refused = await http.post("/runs", json=attack)
        assert refused.status_code == 422
        assert refused.headers["content-type"] == "application/problem+json"
        assert "demo.agent" in refused.json()["detail"]
        for name in ("demo.cpu", "demo.sleep", "demo.echo"):
            response = await http.post("/runs", json={"handler": name, "input": {}})
            assert response.status_code == 422, name
        assert (await http.get("/demo/model", params={"stall_after": 0})).status_code == 404
        handlers = {item["name"] for item in (await http.get("/handlers")).json()}
        assert not any(name.startswith("demo.") for name in handlers)
        assert (await http.get("/runs")).json()["items"] == []
    assert listener.received == []


async def test_demo_agent_takes_no_url_and_sends_its_key_only_to_its_own_api(
    processes: Processes, listener: Listener
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    processes.worker(LEASEHOLD_API_KEY=KEY)
    attacks = [
        {"model_url": listener.url},
        {"model": {"tokens": 1, "url": listener.url}},
        {"tools": [{"name": "x", "url": listener.url}]},
    ]
    async with AsyncClient(url, api_key=KEY) as client:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for attack in attacks:
                response = await http.post(
                    "/runs",
                    json={"handler": "demo.agent", "input": attack},
                    headers={"Authorization": f"Bearer {KEY}"},
                )
                assert response.status_code == 422, (attack, response.text)
                assert response.headers["content-type"] == "application/problem+json"
        assert (await client.list_runs()).items == [], "a refused run wrote nothing"
        # the same handler, honestly used, streams from the API's own model with the key
        run = await client.create(
            "demo.agent", {"model": {"first_token_s": 0, "gap_s": 0, "tokens": 3}, "tools": []}
        )
        events = [event async for event in client.events(run.id)]
        assert (await client.get(run.id)).status == RunStatus.SUCCEEDED
        assert sum(1 for event in events if event.type == "token") == 3
    assert listener.received == [], "nothing ever reached the client-chosen host"


async def test_demo_cpu_and_the_demo_model_are_bounded(processes: Processes) -> None:
    _, url = processes.api()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        response = await http.post(
            "/runs", json={"handler": "demo.cpu", "input": {"seconds": 3600}}
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["loc"][-1] == "seconds"
        for query in ({"first_token_s": 3600}, {"gap_s": 600}, {"tokens": 10**9}):
            model = await http.get("/demo/model", params=query)
            assert model.status_code == 422, query
        agent = {"model": {"first_token_s": 3600}, "tools": []}
        response = await http.post("/runs", json={"handler": "demo.agent", "input": agent})
        assert response.status_code == 422
