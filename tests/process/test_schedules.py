"""Schedules fired by real worker and reconciler processes, under kills."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

from app.models import Run, RunStatus
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import Processes

# the schedule clock at half the defaults, tick included: a 0.5 s interval (the API allows
# it), a 1 s grace and a 0.1 s tick, so each test sees as many fire times, each as late in
# intervals, in half the seconds
INTERVAL_MS = 500
INTERVAL_S = INTERVAL_MS / 1000
CLOCK = {"LEASEHOLD_SCHEDULE_INTERVAL_MIN_S": str(INTERVAL_S), "LEASEHOLD_SCHEDULE_GRACE_S": "1"}
FAST = {**CLOCK, "LEASEHOLD_SCHEDULE_TICK_S": "0.1"}
POLICIES = ("skip", "allow", "cancel_previous", "buffer_one")


async def runs_of(run_store: RunStore, schedule_id: str) -> list[Run]:
    page = await run_store.list_runs(limit=500)
    runs = [run for run in page.items if run.schedule_id == schedule_id]
    return sorted(runs, key=lambda run: run.fire_at or run.created_at)


async def settled(run_store: RunStore, schedule_id: str) -> list[Run]:
    return await eventually(
        lambda: runs_of(run_store, schedule_id),
        until=lambda runs: bool(runs) and all(run.status.is_terminal for run in runs),
        timeout_s=60,
        what=f"every run of {schedule_id} to end",
    )


def overlaps(runs: list[Run]) -> int:
    """Pairs of consecutive runs where the later started before the earlier ended."""
    count = 0
    for a, b in itertools.pairwise(runs):
        if b.first_started_at and a.finished_at and b.first_started_at < a.finished_at:
            count += 1
    return count


async def test_each_overlap_policy_with_runs_that_outlast_the_interval(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api(**CLOCK)
    processes.worker("--concurrency", "32", **FAST)
    async with httpx.AsyncClient(base_url=url) as http:
        for policy in POLICIES:
            body: dict[str, Any] = {
                "id": f"o-{policy}",
                "interval_s": INTERVAL_S,
                "overlap": policy,
                "run": {"handler": "demo.sleep", "input": {"seconds": 2.5 * INTERVAL_S}},
            }
            assert (await http.post("/schedules", json=body)).status_code == 201
        await eventually(
            lambda: runs_of(run_store, "o-allow"),
            until=lambda runs: len(runs) >= 6,
            timeout_s=60,
            what="six fires of the allow schedule",
        )
        for policy in POLICIES:
            await http.post(f"/schedules/o-{policy}/pause")
        views = {p: (await http.get(f"/schedules/o-{p}")).json() for p in POLICIES}
        done = {p: await settled(run_store, f"o-{p}") for p in POLICIES}

    assert overlaps(done["allow"]) >= 2  # every fire started, over the one before
    assert overlaps(done["skip"]) == 0 and views["skip"]["skipped_count"] >= 1
    assert overlaps(done["buffer_one"]) == 0 and views["buffer_one"]["skipped_count"] >= 1
    # a buffered fire starts after the previous ends, later than its own fire time
    assert any(
        run.first_started_at
        and run.fire_at
        and (run.first_started_at - run.fire_at).total_seconds() > INTERVAL_S / 2
        for run in done["buffer_one"][1:]
    )
    newest = done["cancel_previous"]
    assert len(newest) >= 3
    assert [run.status for run in newest[:-2]] == [RunStatus.CANCELLED] * (len(newest) - 2)


async def test_one_run_per_fire_time_with_racing_reconcilers_and_killed_workers(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api(**CLOCK)
    workers = [processes.worker(**FAST) for _ in range(2)]
    reconcilers = [processes.spawn("reconciler", ["reconciler"], FAST) for _ in range(2)]
    async with httpx.AsyncClient(base_url=url) as http:
        body = {
            "id": "every-second",
            "interval_s": INTERVAL_S,
            "overlap": "allow",
            "missed": "all",
            "run": {"handler": "demo.echo", "input": {"message": "tick"}},
        }
        assert (await http.post("/schedules", json=body)).status_code == 201
        await eventually(
            lambda: runs_of(run_store, "every-second"), until=lambda r: len(r) >= 3, timeout_s=60
        )
        workers[0].kill()
        reconcilers[0].kill()
        workers.append(processes.worker(**FAST))  # a replacement joins the race
        await eventually(
            lambda: runs_of(run_store, "every-second"), until=lambda r: len(r) >= 8, timeout_s=60
        )
        await http.post("/schedules/every-second/pause")
        view = (await http.get("/schedules/every-second")).json()
    runs = await runs_of(run_store, "every-second")
    fires = [int(run.fire_at.timestamp() * 1000) for run in runs if run.fire_at]
    assert len(fires) == len(set(fires)) == len(runs) == view["fired_count"]
    assert {b - a for a, b in itertools.pairwise(fires)} == {INTERVAL_MS}  # none missed or doubled
