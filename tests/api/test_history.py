"""GET /runs/{id}/history: what a replay needs, bounded; unknown and malformed ids are 4xx."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from app.models.history import RunHistory
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.runs.history import MAX_HISTORY_RECORDS
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.testing import load_history


async def test_a_run_s_history_holds_its_record_steps_and_events(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={"m": "é"}))).run.id
    answer = await api.get(f"/runs/{run_id}/history")
    assert answer.status_code == 200, answer.text
    history = load_history(answer.json())
    assert (history.run.id, history.run.handler, history.run.input) == (
        run_id,
        "demo.echo",
        {"m": "é"},
    )
    assert history.steps == [] and history.effects == {}
    assert [event.type for event in history.events] == ["created"]
    assert history.events_truncated is False


async def test_a_huge_event_stream_is_cut_and_says_so(
    api: httpx.AsyncClient, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    key = QueueKeys(prefix, "default").events(run_id)
    for _ in range(30):
        await redis_client.xadd(key, {"type": "note", "ts": "1", "fence": "0", "data": "{}"})
    answer = await api.get(f"/runs/{run_id}/history", params={"max_events": 5})
    history = RunHistory.model_validate(answer.json())
    assert len(history.events) == 5 and history.events_truncated is True


async def test_too_many_step_records_is_413_and_nothing_else_is_read(
    api: httpx.AsyncClient, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    waits = QueueKeys(prefix, "default").waits(run_id)
    await redis_client.hset(waits, mapping={f"f{n}": "{}" for n in range(MAX_HISTORY_RECORDS + 1)})
    answer = await api.get(f"/runs/{run_id}/history")
    assert answer.status_code == 413
    assert answer.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/runs/default.01HZZZZZZZZZZZZZZZZZZZZZZZ/history", 404),
        ("/runs/nope/history", 422),
        ("/runs/" + "é" * 300 + "/history", 422),
        ("/runs/default.01HZZZZZZZZZZZZZZZZZZZZZZZ/history?max_events=1001", 422),
        ("/runs/default.01HZZZZZZZZZZZZZZZZZZZZZZZ/history?max_events=-1", 422),
        ("/runs/default.01HZZZZZZZZZZZZZZZZZZZZZZZ/history?max_events=x", 422),
    ],
)
async def test_unknown_and_malformed_requests_are_problems(
    api: httpx.AsyncClient, path: str, status: int, settings: Settings
) -> None:
    answer = await api.get(path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
