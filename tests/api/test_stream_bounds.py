"""Floods against a real API server on real Redis: made-up queues, many queues, too many
streams, too many sockets, half-sent requests. Each is refused (4xx, or 503
problem+json with Retry-After), never a hang; a normal client is still served,
and again once the flood ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from urllib.parse import urlsplit

import httpx
import redis.asyncio as aioredis

from app.api.app import STREAM_POOL_CONNECTIONS
from app.client import AsyncClient
from app.models import RunEvent
from app.store.keys import GlobalKeys
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.api.test_activity_stream import parse
from tests.support.polling import eventually
from tests.support.processes import Processes

# the figure: a 0.2 s run's stream ends with its terminal event within 2 s
TERMINAL_WITHIN_S = 2.0


async def redis_connections(client: aioredis.Redis) -> tuple[int, int]:
    """(every client connection, those blocked in XREAD) as Redis's CLIENT LIST shows them."""
    clients = await client.client_list()
    return len(clients), sum(1 for entry in clients if entry.get("cmd") == "xread")


def assert_retry_later(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["Retry-After"]) >= 1


async def short_run_streams_to_the_end(url: str) -> list[RunEvent]:
    """Create a 0.2 s run and follow it; its events, ending with the terminal one, in time."""
    async with AsyncClient(url) as client:
        run = await client.create("demo.sleep", {"seconds": 0.2})
        events = await asyncio.wait_for(
            _collect(client, run.id), timeout=TERMINAL_WITHIN_S + 0.2 * 2
        )
    assert events[-1].type == "succeeded"
    return events


async def _collect(client: AsyncClient, run_id: str) -> list[RunEvent]:
    return [event async for event in client.events(run_id)]


async def warm_worker(processes: Processes, url: str) -> None:
    """A worker that has claimed a run already: the timing below is the stream's, not start-up."""
    processes.worker()
    async with AsyncClient(url) as client:
        run = await client.create("demo.echo", {})
        await asyncio.wait_for(_collect(client, run.id), timeout=60)


async def test_eleven_requests_for_a_hundred_made_up_queues_each_open_nothing(
    processes: Processes, redis_client: aioredis.Redis
) -> None:
    _, url = processes.api(LEASEHOLD_REDIS_MAX_CONNECTIONS="4")
    await warm_worker(processes, url)
    before, _ = await redis_connections(redis_client)
    names = "&".join(f"queue=made-up-{index}" for index in range(100))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        flood = [http.get(f"/activity?{names}") for _ in range(12)]
        responses, _ = await asyncio.gather(
            asyncio.gather(*flood), short_run_streams_to_the_end(url)
        )
        after, blocked = await redis_connections(redis_client)
    assert all(400 <= response.status_code < 500 for response in responses)
    # at most the request pool and the feeds' pool, however many queues were named
    assert after - before <= 4 + STREAM_POOL_CONNECTIONS and blocked <= 2, (before, after)


async def test_a_hundred_real_queues_per_request_share_one_reader_up_to_the_process_cap(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    queues = [f"q{index:03}" for index in range(300)]
    await redis_client.sadd(GlobalKeys(run_store.prefix).queues, *queues)  # declared
    _, url = processes.api(
        LEASEHOLD_ACTIVITY_MAX_FOLLOWED_QUEUES="250", LEASEHOLD_REDIS_MAX_CONNECTIONS="4"
    )
    await warm_worker(processes, url)
    before, _ = await redis_connections(redis_client)
    # eleven requests of 100 queues each, 200 distinct queues in all
    requests = [range(0, 100), range(100, 200)] + [
        range(index * 10, index * 10 + 100) for index in range(9)
    ]
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        async with AsyncExitStack() as streams:
            held: list[AsyncIterator[dict[str, str]]] = []
            for queues in requests:
                query = "&".join(f"queue=q{index:03}" for index in queues)
                response = await streams.enter_async_context(
                    http.stream("GET", f"/activity?{query}")
                )
                messages = parse(response.aiter_lines())
                held.append(messages)  # dropped, it would close the response
                ready = await anext(messages)
                assert ready["event"] == "ready"
                assert len(json.loads(ready["data"])["queues"]) == 100
            await short_run_streams_to_the_end(url)
            during, blocked = await redis_connections(redis_client)
            past_cap = "&".join(f"queue=q{index:03}" for index in range(200, 300))
            refused = await http.get(f"/activity?{past_cap}")
        assert during - before <= 4 + STREAM_POOL_CONNECTIONS and blocked <= 2, (before, during)
        assert_retry_later(refused)

        # the flood is gone: the same request is served
        async def served() -> str | None:
            async with http.stream("GET", f"/activity?{past_cap}") as response:
                if response.status_code != 200:
                    return None
                return (await anext(parse(response.aiter_lines())))["event"]

        assert await eventually(served, until=lambda event: event == "ready") == "ready"


async def test_without_queue_names_a_stream_follows_the_first_queues_up_to_the_cap(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    queues = [f"q{index:04}" for index in range(1500)]
    await redis_client.sadd(GlobalKeys(run_store.prefix).queues, *queues)  # declared
    _, url = processes.api(LEASEHOLD_ACTIVITY_MAX_QUEUES="100")
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        http.stream("GET", "/activity") as response,
    ):
        messages = parse(response.aiter_lines())
        ready = json.loads((await anext(messages))["data"])
        _, blocked = await redis_connections(redis_client)
    assert ready["limit"] == 100
    assert ready["queues"] == sorted([*queues, "default"])[:100]
    assert blocked <= 1


async def open_streams(
    stack: AsyncExitStack, http: httpx.AsyncClient, paths: list[str]
) -> list[AsyncIterator[dict[str, str]]]:
    """Open each stream and read its first message, so the server surely holds it.

    Keep what it returns: a message iterator that is dropped closes its response.
    """
    held = []
    for path in paths:
        response = await stack.enter_async_context(http.stream("GET", path))
        assert response.status_code == 200
        messages = parse(response.aiter_lines())
        await anext(messages)
        held.append(messages)
    return held


async def test_past_the_follower_cap_streams_are_503_until_the_flood_ends(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api(LEASEHOLD_SSE_MAX_FOLLOWERS="5")
    run_id = (await run_store.create(NewRun(handler="demo.sleep", input={"seconds": 60}))).run.id
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async with AsyncExitStack() as flood:
            held = await open_streams(flood, http, [f"/runs/{run_id}/events"] * 5)
            assert_retry_later(await http.get(f"/runs/{run_id}/events"))
            assert_retry_later(await http.get("/activity"))
            listed = (await http.get("/runs")).json()["items"]
            stream_create = await http.post(
                "/runs",
                json={"handler": "demo.echo", "input": {}},
                headers={"Accept": "text/event-stream"},
            )
            assert_retry_later(stream_create)
            assert (await http.get("/runs")).json()["items"] == listed  # nothing was created
            assert (await http.get("/healthz")).status_code == 200  # plain requests still served
            metrics = (await http.get("/metrics")).text
            assert 'leasehold_sse_refused_total{cap="followers"} 3.0' in metrics
            assert "leasehold_sse_streams 5.0" in metrics
            assert len(held) == 5

        async def status() -> int:
            async with http.stream("GET", f"/runs/{run_id}/events") as response:
                return response.status_code

        assert await eventually(status, until=lambda code: code == 200) == 200


async def test_past_the_followed_runs_cap_a_new_run_is_503_but_a_followed_one_is_not(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api(LEASEHOLD_SSE_MAX_FOLLOWED_RUNS="3")
    runs = [
        (await run_store.create(NewRun(handler="demo.sleep", input={"seconds": 60}))).run.id
        for _ in range(4)
    ]
    async with httpx.AsyncClient(base_url=url, timeout=30) as http, AsyncExitStack() as flood:
        held = await open_streams(flood, http, [f"/runs/{run_id}/events" for run_id in runs[:3]])
        assert_retry_later(await http.get(f"/runs/{runs[3]}/events"))
        held += await open_streams(flood, http, [f"/runs/{runs[0]}/events"])  # no new run
        assert len(held) == 4


async def idle_sockets(url: str, count: int) -> list[asyncio.StreamWriter]:
    parts = urlsplit(url)
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writers.append(writer)
    return writers


async def test_past_the_connection_cap_a_request_is_503_problem_json_until_sockets_close(
    processes: Processes,
) -> None:
    _, url = processes.api(LEASEHOLD_API_MAX_CONNECTIONS="10")
    writers = await idle_sockets(url, 12)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            refused = await http.get("/healthz")
            assert_retry_later(refused)
            assert refused.json()["title"] == "Too many connections"
            for writer in writers:
                writer.close()
            await eventually(
                lambda: http.get("/healthz"), until=lambda response: response.status_code == 200
            )
    finally:
        for writer in writers:
            writer.close()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF) without answering a byte."""
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(reader.read(), timeout=30) == b""
    return True


async def test_half_sent_requests_and_idle_sockets_are_closed_after_the_header_timeout(
    processes: Processes,
) -> None:
    _, url = processes.api(LEASEHOLD_API_HEADER_TIMEOUT_S="0.5", LEASEHOLD_API_KEEP_ALIVE_S="0.5")
    parts = urlsplit(url)
    connections = [await asyncio.open_connection(parts.hostname, parts.port) for _ in range(60)]
    for index, (_, writer) in enumerate(connections):
        if index % 3 == 0:
            continue  # sends nothing at all
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: api\r\n" if index % 3 == 1 else b"GET /hea")
        await writer.drain()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        assert (await http.get("/healthz")).status_code == 200
    closed = await asyncio.gather(*(closed_by_server(reader) for reader, _ in connections))
    assert all(closed)
    # a finished request's idle keep-alive connection is closed too
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert answer.startswith(b"HTTP/1.1 200")
    with contextlib.suppress(asyncio.IncompleteReadError):
        await asyncio.wait_for(reader.read(), timeout=30)  # the body, then EOF
    for _, other in [*connections, (reader, writer)]:
        other.close()
