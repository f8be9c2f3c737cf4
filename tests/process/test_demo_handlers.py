"""The demo handlers read well: what a new user sees when running them (real API, worker)."""

from __future__ import annotations

import httpx

from app.client import AsyncClient
from app.models import RunStatus
from tests.support.processes import Processes


async def test_demo_agent_answer_has_single_spaces_and_sleep_progress_is_sparse(
    processes: Processes,
) -> None:
    _, url = processes.api()
    processes.worker()
    agent_input = {
        "tools": [],
        "steps": 2,
        "model": {"first_token_s": 0, "gap_s": 0, "tokens": 5},
    }
    async with AsyncClient(url) as client:
        agent = await client.create("demo.agent", agent_input)
        sleep = await client.create("demo.sleep", {"seconds": 3})
        agent_events = [event async for event in client.events(agent.id)]
        sleep_events = [event async for event in client.events(sleep.id)]
        agent = await client.get(agent.id)
    assert agent.status == RunStatus.SUCCEEDED, agent_events[-1]
    assert agent.output is not None
    # two steps of the model's first five words, one space between every two words
    words = "the lease wakes someone up"
    assert agent.output["answer"] == f"{words} {words}"
    # the stream still reads as text inline: each token keeps its trailing space
    assert "".join(e.data["text"] for e in agent_events if e.type == "token").startswith(words)
    # a 3 s sleep reports progress once by default (every 10 s, or when done), not each second
    assert sleep_events[-1].type == "succeeded"
    assert len([event for event in sleep_events if event.type == "progress"]) == 1


def test_demo_sleep_refuses_progress_more_often_than_every_tenth_of_a_second(
    processes: Processes,
) -> None:
    _, url = processes.api()
    body = {"handler": "demo.sleep", "input": {"seconds": 60, "progress_every_s": 1e-9}}
    response = httpx.post(f"{url}/runs", json=body, timeout=30)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
