"""Following runs over SSE against real uvicorn servers, real workers and real Redis.

(The in-process ASGI transport buffers whole bodies, so every stream here goes
through a real server subprocess.)
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.client import AsyncClient, Client
from app.models import RunEvent, RunStatus
from app.stack.processes import wait_healthy
from app.store.keys import QueueKeys
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import HEALTHY_TIMEOUT_S, Processes


async def stored_events(run_store: RunStore, run_id: str) -> list[RunEvent]:
    return await run_store.read_events(run_id)


async def collect(client: AsyncClient, run_id: str, **kwargs: Any) -> list[RunEvent]:
    return [event async for event in client.events(run_id, **kwargs)]


async def wait_until_settled(run_store: RunStore, run_id: str) -> None:
    await eventually(
        lambda: run_store.get(run_id),
        until=lambda run: run.status.is_settled,
        what="the run to end",
    )


def sse_messages(lines: list[str]) -> list[dict[str, str]]:
    """Parse raw SSE lines into messages (comments dropped)."""
    messages: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        if not line:
            if current:
                messages.append(current)
            current = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")
    return messages


async def test_a_run_streams_its_whole_life_and_the_server_closes_the_stream(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        run_id = (
            await http.post(
                "/runs",
                json={"handler": "demo.sleep", "input": {"seconds": 1.0, "progress_every_s": 0.2}},
            )
        ).json()["id"]
        lines: list[str] = []
        async with http.stream("GET", f"/runs/{run_id}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                lines.append(line)
    messages = sse_messages(lines)
    assert messages[0]["retry"].isdigit()
    kinds = [message["event"] for message in messages]
    assert kinds[0] == "created" and kinds[1] == "claimed"
    assert kinds[-1] == "succeeded"
    assert kinds.count("progress") >= 3
    for message in messages:
        event = json.loads(message["data"])
        assert message["id"] == event["id"]
        assert event["run_id"] == run_id
    stored = [event.id for event in await stored_events(run_store, run_id)]
    assert [message["id"] for message in messages] == stored


async def test_reconnecting_with_last_event_id_gives_each_event_exactly_once(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    run_id = (
        await run_store.create(NewRun(handler="test.tokens", input={"count": 60, "gap_s": 0.02}))
    ).run.id
    seen: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async with http.stream("GET", f"/runs/{run_id}/events") as response:
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    seen.append(line.removeprefix("id:").strip())
                if len(seen) == 10:
                    break  # drop the connection mid-run
        async with AsyncClient(url) as client:
            rest = await collect(client, run_id, last_event_id=seen[-1])
    union = seen + [event.id for event in rest]
    assert union == [event.id for event in await stored_events(run_store, run_id)]
    assert len(union) == len(set(union))
    assert rest[-1].type == "succeeded"


async def test_follow_on_one_api_process_while_another_creates(
    processes: Processes, run_store: RunStore
) -> None:
    _, first = processes.api()
    _, second = processes.api()
    processes.worker()
    async with AsyncClient(first) as creator, AsyncClient(second) as follower:
        run = await creator.create("test.tokens", {"count": 20, "gap_s": 0.01})
        events = await collect(follower, run.id)
    assert [event.id for event in events] == [
        event.id for event in await stored_events(run_store, run.id)
    ]
    assert [event.data["i"] for event in events if event.type == "token"] == list(range(20))


async def test_disconnecting_from_create_and_stream_leaves_the_run_running(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        body = {"handler": "demo.sleep", "input": {"seconds": 1.0, "progress_every_s": 0.2}}
        async with http.stream(
            "POST", "/runs", json=body, headers={"Accept": "text/event-stream"}
        ) as response:
            assert response.status_code == 201
            run_id = response.headers["x-run-id"]
            assert response.headers["location"] == f"/runs/{run_id}"
            async for line in response.aiter_lines():
                if line.startswith("event: claimed"):
                    break
    await wait_until_settled(run_store, run_id)
    assert (await run_store.get(run_id)).status == RunStatus.SUCCEEDED


async def test_cancel_on_disconnect_cancels_the_run_when_the_client_leaves(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        body = {"handler": "demo.sleep", "input": {"seconds": 30}, "cancel_on_disconnect": True}
        async with http.stream(
            "POST", "/runs", json=body, headers={"Accept": "text/event-stream"}
        ) as response:
            run_id = response.headers["x-run-id"]
            async for line in response.aiter_lines():
                if line.startswith("event: claimed"):
                    break
    await wait_until_settled(run_store, run_id)
    assert (await run_store.get(run_id)).status == RunStatus.CANCELLED


async def test_five_hundred_followers_share_one_redis_reader(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    _, url = processes.api()
    run_id = (
        await run_store.create(NewRun(handler="test.tokens", input={"count": 30, "gap_s": 0.01}))
    ).run.id
    limits = httpx.Limits(max_connections=600, max_keepalive_connections=600)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        client = AsyncClient(url)
        client.http = http
        followers = [asyncio.create_task(collect(client, run_id)) for _ in range(500)]
        readers = await eventually(
            lambda: _blocked_readers(redis_client),
            until=lambda n: n >= 1,
            what="the API to start reading",
        )
        await asyncio.sleep(0.5)  # let every follower attach before counting again
        assert await _blocked_readers(redis_client) == readers == 1
        processes.worker()
        results = await asyncio.gather(*followers)
    expected = [event.id for event in await stored_events(run_store, run_id)]
    assert all([event.id for event in events] == expected for events in results)


async def _blocked_readers(client: aioredis.Redis) -> int:
    clients = await client.client_list()
    return sum(1 for entry in clients if entry.get("cmd") == "xread")


async def test_killing_the_owner_while_following_ends_the_stream_with_orphaned(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    processes.worker()
    async with AsyncClient(url) as client:
        run = await client.create("demo.sleep", {"seconds": 60})
        await eventually(
            lambda: run_store.get(run.id),
            until=lambda r: r.status == RunStatus.RUNNING,
            what="running",
        )
        follow = asyncio.create_task(collect(client, run.id))
        current = await run_store.get(run.id)
        assert current.owner_id is not None
        pid = int(current.owner_id.rsplit("-", 2)[1])
        next(proc for proc in processes.started if proc.pid == pid).signal(signal.SIGKILL)
        events = await asyncio.wait_for(follow, timeout=30)
    assert events[-1].type == "orphaned"
    assert events[-1].data["error"]["message"] == "executor lease expired"


async def test_trimmed_history_is_announced_with_replay_unavailable(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis
) -> None:
    _, url = processes.api()
    processes.worker()
    async with AsyncClient(url) as client:
        run = await client.create("test.tokens", {"count": 20})
        await wait_until_settled(run_store, run.id)
        key = run_store.keys("default").events(run.id)
        await redis_client.xtrim(key, maxlen=5, approximate=False)
        events = await collect(client, run.id)
    assert events[0].type == "replay_unavailable"
    assert events[0].id == ""
    assert [event.id for event in events[1:]] == [
        event.id for event in await stored_events(run_store, run.id)
    ]
    assert events[-1].type == "succeeded"


async def test_unknown_run_is_404_and_bad_last_event_id_is_400_before_streaming(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        missing = await http.get("/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV/events")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        bad = await http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code == 400
        bad_query = await http.get(f"/runs/{run_id}/events", params={"last_event_id": "1-2-3"})
        assert bad_query.status_code == 400


async def test_token_bursts_arrive_complete_and_in_order_before_the_terminal_event(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker()
    async with AsyncClient(url) as client:
        run = await client.create("test.tokens", {"count": 3000})
        events = await collect(client, run.id)
    tokens = [event.data["i"] for event in events if event.type == "token"]
    assert tokens == list(range(3000))
    assert events[-1].type == "succeeded"


async def test_an_oversized_event_is_a_clear_error_for_the_handler_not_a_broken_stream(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    run_id = (await run_store.create(NewRun(handler="test.oversized", input={}))).run.id
    await wait_until_settled(run_store, run_id)
    run = await run_store.get(run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert "limit is" in run.output["refused"]
    kinds = [event.type for event in await stored_events(run_store, run_id)]
    assert kinds == ["created", "claimed", "note", "succeeded"]


async def test_cancel_reaches_the_owner_long_before_the_next_heartbeat(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """The push reaches an owner that listens and holds the run: not the renewal, 20 s away.

    The push is best effort (app/executor/listener.py): a cancel published before the
    worker subscribed, or before its claim's answer registered the run, is carried by
    the next renewal instead. So the cancel is asked once both hold, not as soon as
    the claim wrote ``running``: under load the worker got there seconds later.
    """
    processes.worker(LEASEHOLD_LEASE_TTL_S="60")  # next heartbeat in 20 s
    run_id = (
        await run_store.create(
            NewRun(handler="demo.sleep", input={"seconds": 120, "progress_every_s": 0.1})
        )
    ).run.id
    channel = QueueKeys(prefix, "default").cancel_channel
    await eventually(
        lambda: redis_client.pubsub_numsub(channel),
        until=lambda counts: counts[0][1] >= 1,
        what="the worker to subscribe to cancels",
    )
    await eventually(
        lambda: stored_events(run_store, run_id),
        until=lambda events: any(event.type == "progress" for event in events),
        what="the handler to run (its first progress event)",
    )
    asked = time.monotonic()
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    await eventually(
        lambda: run_store.get(run_id),
        until=lambda r: r.status == "cancelled",
        timeout_s=15,
        what="cancelled",
    )
    print(f"cancel acknowledged {time.monotonic() - asked:.3f}s after the request")


def test_sync_client_resumes_after_the_api_process_dies(
    processes: Processes, run_store: RunStore
) -> None:
    api, url = processes.api()
    processes.worker()
    port = url.rsplit(":", 1)[1]
    received: list[RunEvent] = []
    with Client(url) as client:
        run = client.create("test.tokens", {"count": 40, "gap_s": 0.05})
        reader = threading.Thread(target=lambda: received.extend(client.events(run.id)))
        reader.start()
        deadline = time.monotonic() + 30
        while len(received) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        api.signal(signal.SIGKILL)
        api.wait(timeout_s=10)
        replacement = processes.spawn("api", ["api", "--port", port])
        wait_healthy(url, replacement, timeout_s=HEALTHY_TIMEOUT_S)
        reader.join(timeout=60)
    assert not reader.is_alive()
    ids = [event.id for event in received]
    assert len(ids) == len(set(ids))
    assert received[-1].type == "succeeded"
    tokens = [event.data["i"] for event in received if event.type == "token"]
    assert tokens == list(range(40))


@pytest.mark.parametrize("header", ["Last-Event-ID", None])
async def test_resume_point_accepts_header_or_query(
    processes: Processes, run_store: RunStore, header: str | None
) -> None:
    _, url = processes.api()
    processes.worker()
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    await wait_until_settled(run_store, run_id)
    first = (await stored_events(run_store, run_id))[0].id
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        kwargs: dict[str, Any] = (
            {"headers": {header: first}} if header else {"params": {"last_event_id": first}}
        )
        response = await http.get(f"/runs/{run_id}/events", **kwargs)
    kinds = [m["event"] for m in sse_messages(response.text.splitlines())]
    assert kinds == ["claimed", "succeeded"]
