"""The client's resumable follow, against scripted API answers (httpx.MockTransport).

Found by the chaos harness: a follower that reconnected while Redis was
restarting got a 503 from the API and gave up, so it never learned the run's
outcome. A 502/503/504 now means "resume later", like a dropped connection.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time

import httpx
import pytest

from app.client import ApiError, AsyncClient, Client

RUN = "default.01M8NMVX0F2FBPYNB2A04QJM1Z"


def unavailable() -> httpx.Response:
    """What the API answers while Redis cannot be reached."""
    return httpx.Response(
        503, json={"title": "Run store unavailable", "status": 503}, headers={"Retry-After": "1"}
    )


def sse(*events: tuple[str, str], run_id: str = RUN) -> httpx.Response:
    """An SSE body with (id, type) events of ``run_id``."""
    lines = []
    for event_id, kind in events:
        data = {
            "id": event_id,
            "run_id": run_id,
            "type": kind,
            "ts": "2026-01-01T00:00:00Z",
            "fence": 1,
        }
        lines += [f"id: {event_id}", f"event: {kind}", f"data: {json.dumps(data)}", ""]
    return httpx.Response(
        200, text="\n".join(lines) + "\n", headers={"content-type": "text/event-stream"}
    )


class ScriptedApi:
    """Answers GET /runs/{id}/events from a script; records each Last-Event-ID and when."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.resumed_from: list[str | None] = []
        self.arrived_at: list[float] = []  # monotonic

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived_at.append(time.monotonic())
        self.resumed_from.append(request.headers.get("last-event-id"))
        return self.answers.pop(0)


def outage_script() -> ScriptedApi:
    """Two events, the connection drops, Redis is away twice, then the rest."""
    return ScriptedApi(
        sse(("1-0", "created"), ("2-0", "claimed")),
        unavailable(),
        unavailable(),
        sse(("3-0", "progress"), ("4-0", "succeeded")),
    )


async def test_async_follow_resumes_through_503s_and_sees_every_event_once() -> None:
    api = outage_script()
    async with AsyncClient("http://api", transport=httpx.MockTransport(api)) as client:
        events = [event async for event in client.events(RUN)]
    assert [event.id for event in events] == ["1-0", "2-0", "3-0", "4-0"]
    assert api.resumed_from == [None, "2-0", "2-0", "2-0"]


def test_sync_follow_resumes_through_503s_and_sees_every_event_once() -> None:
    api = outage_script()
    with Client("http://api", transport=httpx.MockTransport(api)) as client:
        events = list(client.events(RUN))
    assert [event.type for event in events] == ["created", "claimed", "progress", "succeeded"]
    assert api.resumed_from == [None, "2-0", "2-0", "2-0"]


async def test_a_404_is_an_answer_not_a_reason_to_retry() -> None:
    api = ScriptedApi(httpx.Response(404, json={"title": "Run not found", "status": 404}))
    async with AsyncClient("http://api", transport=httpx.MockTransport(api)) as client:
        with pytest.raises(ApiError) as raised:
            _ = [event async for event in client.events(RUN)]
    assert raised.value.status == 404
    assert len(api.resumed_from) == 1


async def test_without_reconnect_a_503_is_raised() -> None:
    api = ScriptedApi(unavailable())
    async with AsyncClient("http://api", transport=httpx.MockTransport(api)) as client:
        with pytest.raises(ApiError) as raised:
            _ = [event async for event in client.events(RUN, reconnect=False)]
    assert raised.value.status == 503


OUTAGES = 3


async def test_two_followers_cut_off_together_reconnect_at_different_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # an API restart cuts off every follower at once; without jitter they all come back
    # in the same instant, and again at each doubling of the delay
    runs = ["default.01M8NMVX0F2FBPYNB2A04QJM1A", "default.01M8NMVX0F2FBPYNB2A04QJM1B"]
    apis = {
        run_id: ScriptedApi(
            *[unavailable() for _ in range(OUTAGES)],
            sse(("1-0", "created"), ("2-0", "succeeded"), run_id=run_id),
        )
        for run_id in runs
    }

    async def follow(run_id: str) -> list[str]:
        transport = httpx.MockTransport(apis[run_id])
        async with AsyncClient("http://api", transport=transport) as client:
            return [event.type async for event in client.events(run_id)]

    with caplog.at_level(logging.INFO, logger="app.client"):
        seen = await asyncio.gather(*(follow(run_id) for run_id in runs))
    assert seen == [["created", "succeeded"]] * 2
    delays: dict[str, list[float]] = {}
    for run_id in runs:
        mine = f"following {run_id} "
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(mine)]
        delays[run_id] = [float(re.findall(r"retrying in ([0-9.]+)s", line)[0]) for line in lines]
        assert len(delays[run_id]) == OUTAGES, lines
        # each wait was really waited: the next request came no sooner than the delay said
        arrived = apis[run_id].arrived_at
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrived)]
        assert all(gap >= delay - 0.01 for gap, delay in zip(gaps, delays[run_id], strict=False))
    assert delays[runs[0]] != delays[runs[1]]
