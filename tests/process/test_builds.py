"""Builds with real processes: each claim records its worker's build on the run."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.polling import eventually
from tests.support.processes import Processes


@pytest.mark.slow
async def test_a_run_records_the_build_of_the_worker_that_claimed_it(
    processes: Processes,
) -> None:
    _, api_url = processes.api()
    processes.worker(LEASEHOLD_BUILD_ID="v1-abc")
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:

        async def workers() -> list[Any]:
            answer: list[Any] = (await client.get("/workers")).json()
            return answer

        listed = await eventually(workers, until=lambda found: len(found) == 1, what="a worker")
        assert listed[0]["build_id"] == "v1-abc"
        made = await client.post("/runs", json={"handler": "demo.echo", "input": {"message": "b"}})
        run_id = made.json()["id"]

        async def run() -> Any:
            return (await client.get(f"/runs/{run_id}")).json()

        done = await eventually(run, until=lambda r: r["status"] == "succeeded", what="the run")
        events = (await client.get(f"/runs/{run_id}/events")).text
    assert done["build_id"] == "v1-abc"
    assert '"build_id":"v1-abc"' in events.replace(" ", "")
