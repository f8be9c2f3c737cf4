"""Real worker processes: drained by POST /workers/{id}/drain, marked dead by GET /workers."""

from __future__ import annotations

import signal

import httpx

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes


async def test_a_drained_worker_stops_claiming_finishes_its_run_and_exits(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    worker = processes.worker()
    held = (await run_store.create(NewRun(handler="test.record", input={"seconds": 2}))).run.id
    await wait_status(run_store, held, RunStatus.RUNNING)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        listed = (await http.get("/workers")).json()
        worker_id = next(item["id"] for item in listed if item["pid"] == worker.pid)
        response = await http.post(f"/workers/{worker_id}/drain")
        assert response.status_code == 202, response.text
        assert response.json() == {"id": worker_id, "drain_requested": True}
        assert (await http.post(f"/workers/{worker_id}/drain")).status_code == 202  # idempotent
        await eventually(
            lambda: http.get("/workers"),
            until=lambda r: any(item["draining"] for item in r.json()),
            timeout_s=20,
            what="the worker to say it is draining",
        )
        # draining: a run created now is not claimed by it
        later = (await run_store.create(NewRun(handler="test.record", input={}))).run.id
        assert worker.wait(30) == 0  # exits cleanly once its run is done
        assert (await run_store.get(held)).status == RunStatus.SUCCEEDED
        assert (await run_store.get(later)).status == RunStatus.QUEUED
        assert (await http.get("/workers")).json() == []  # withdrawn on the way out
        gone = await http.post(f"/workers/{worker_id}/drain")
        assert gone.status_code == 404
        assert gone.headers["content-type"].startswith("application/problem+json")
    assert "drain requested" in worker.log()


async def test_a_killed_worker_is_listed_not_alive_then_leaves_the_list(
    processes: Processes,
) -> None:
    _, url = processes.api()
    worker = processes.worker()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        listed = await eventually(
            lambda: http.get("/workers"),
            until=lambda r: any(item["pid"] == worker.pid for item in r.json()),
            what="the worker to advertise itself",
        )
        assert listed.json()[0]["alive"] is True
        worker.signal(signal.SIGKILL)
        # silent past its 1 s lease TTL: marked, while its advertisement (3 TTLs) lasts
        await eventually(
            lambda: http.get("/workers"),
            until=lambda r: [item["alive"] for item in r.json()] == [False],
            timeout_s=20,
            what="the dead worker to be marked not alive",
        )
        await eventually(
            lambda: http.get("/workers"),
            until=lambda r: r.json() == [],
            timeout_s=20,
            what="the dead worker to leave the list",
        )
