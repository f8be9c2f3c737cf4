"""Schedules against the real Redis: one run per fire time, missed fires, overlap policies."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import Run, RunStatus
from app.reconciler.schedule_pass import SchedulePass
from app.settings import Settings
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Scripts
from app.store.runs.store import RunStore
from app.store.schedules.store import Fire, ScheduleStore
from tests.support.polling import eventually

ECHO = {"handler": "demo.echo", "input": {"message": "tick"}}
# the timed tests' clock, at half the defaults: a 0.5 s interval (LEASEHOLD_SCHEDULE_
# INTERVAL_MIN_S allows it) and a 1 s grace, so a fire is late, missed or on time after as
# many intervals as with 1 s and 2 s, and each test waits for as many fire times in half
# the seconds
INTERVAL_MS = 500
INTERVAL_S = INTERVAL_MS / 1000
GRACE_S = 1.0


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The test's settings on the half-speed schedule clock."""
    return settings.model_copy(
        update={"schedule_interval_min_s": INTERVAL_S, "schedule_grace_s": GRACE_S}
    )


async def make(api: httpx.AsyncClient, schedule_id: str, **spec: Any) -> dict[str, Any]:
    body = {"id": schedule_id, "run": ECHO, **spec}
    response = await api.post("/schedules", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def runs_of(run_store: RunStore, schedule_id: str) -> list[Run]:
    page = await run_store.list_runs(limit=500)
    runs = [run for run in page.items if run.schedule_id == schedule_id]
    return sorted(runs, key=lambda run: run.fire_at or run.created_at)


def passes(run_store: RunStore, settings: Settings, count: int) -> list[SchedulePass]:
    return [SchedulePass.for_settings(run_store, settings) for _ in range(count)]


async def test_twenty_racing_reconcilers_make_exactly_one_run_per_fire_time(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings
) -> None:
    await make(api, "race", interval_s=INTERVAL_S, missed="all", overlap="allow")
    racers = passes(run_store, settings, 20)

    async def race_until_fired(count: int) -> int:
        await asyncio.gather(*(racer.tick() for racer in racers))
        return len(await runs_of(run_store, "race"))

    await eventually(
        lambda: race_until_fired(4),
        until=lambda n: n >= 4,
        timeout_s=60,
        interval_s=0.1,
        what="four fires",
    )
    runs = await runs_of(run_store, "race")
    fires = [int(run.fire_at.timestamp() * 1000) for run in runs if run.fire_at]
    assert len(fires) == len(set(fires)) == len(runs)  # one run per fire time
    assert {b - a for a, b in itertools.pairwise(fires)} == {INTERVAL_MS}  # none missed
    schedule = (await api.get("/schedules/race")).json()
    assert schedule["fired_count"] == len(runs)


async def test_missed_fires_after_downtime_follow_each_policy(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings
) -> None:
    for policy in ("skip", "latest", "all"):
        await make(api, f"down-{policy}", interval_s=INTERVAL_S, missed=policy, overlap="allow")
    await asyncio.sleep(6 * INTERVAL_S)  # the outage: no reconciler runs for six fire times
    await SchedulePass.for_settings(run_store, settings).tick()

    skip = await runs_of(run_store, "down-skip")
    latest = await runs_of(run_store, "down-latest")
    every = await runs_of(run_store, "down-all")
    views = {p: (await api.get(f"/schedules/down-{p}")).json() for p in ("skip", "latest", "all")}
    assert len(every) >= 5  # every fire within the catch-up window, oldest first
    assert views["all"]["missed_count"] == 0
    assert len(latest) == 1 and views["latest"]["missed_count"] >= 4
    assert latest[0].fire_at and every[-1].fire_at
    # the newest one (the two schedules' grids start a few ms apart)
    assert abs(latest[0].fire_at - every[-1].fire_at) < timedelta(seconds=INTERVAL_S)
    grace_fires = settings.schedule_grace_s / INTERVAL_S + 1
    assert 1 <= len(skip) <= grace_fires  # only fires within the grace are on time
    assert views["skip"]["missed_count"] + len(skip) == len(every)
    newest = max(r.fire_at for r in every if r.fire_at)
    for view in views.values():  # the next fire is after the outage: none is owed
        assert datetime.fromisoformat(view["next_fire_at"]) > newest


async def test_pause_then_resume_replays_nothing(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings
) -> None:
    await make(api, "nap", interval_s=INTERVAL_S, missed="all", overlap="allow")
    paused = (await api.post("/schedules/nap/pause")).json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    await asyncio.sleep(3 * INTERVAL_S)  # paused across three fire times
    await SchedulePass.for_settings(run_store, settings).tick()
    resumed = (await api.post("/schedules/nap/resume")).json()
    await SchedulePass.for_settings(run_store, settings).tick()
    assert resumed["paused"] is False and resumed["next_fire_at"] is not None
    assert await runs_of(run_store, "nap") == []
    assert resumed["missed_count"] == 0


async def test_a_stale_version_or_a_fire_ahead_of_the_redis_clock_writes_nothing(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    await make(api, "early", interval_s=3600)
    store = ScheduleStore.for_settings(redis_client, Scripts(), settings)
    record = await store.record("early")
    assert record.next_fire_ms is not None
    ahead = Fire(
        "tick",
        [record.next_fire_ms],
        record.version,
        expected_ms=record.next_fire_ms,
        next_ms=record.next_fire_ms + 3_600_000,
    )  # what a reconciler whose clock runs an hour fast would send
    assert (await store.fire(record, ahead)).code == "CONFLICT"
    await api.patch("/schedules/early", json={"interval_s": 1800})
    stale = Fire("trigger", [await store.now_ms()], record.version)
    assert (await store.fire(record, stale)).code == "CONFLICT"
    assert (await api.get("/schedules/early")).json()["fired_count"] == 0


async def trigger(api: httpx.AsyncClient, schedule_id: str) -> dict[str, Any]:
    response = await api.post(f"/schedules/{schedule_id}/trigger")
    assert response.status_code in (200, 201), response.text
    return response.json()


async def test_skip_drops_a_fire_while_the_previous_run_has_not_ended(
    api: httpx.AsyncClient,
) -> None:
    await make(api, "one-at-a-time", cron="0 0 1 1 *", overlap="skip")
    first = await trigger(api, "one-at-a-time")
    second = await trigger(api, "one-at-a-time")
    assert len(first["created"]) == 1
    assert second == {"created": [], "skipped": 1, "buffered": False, "cancelled": []}


async def test_allow_starts_every_fire(api: httpx.AsyncClient) -> None:
    await make(api, "all-in", cron="0 0 1 1 *", overlap="allow")
    created = [(await trigger(api, "all-in"))["created"] for _ in range(3)]
    assert all(len(ids) == 1 for ids in created)


async def test_cancel_previous_cancels_the_run_still_going(
    api: httpx.AsyncClient, run_store: RunStore, lease_store: LeaseStore
) -> None:
    await make(api, "newest", cron="0 0 1 1 *", overlap="cancel_previous")
    queued = (await trigger(api, "newest"))["created"][0]
    second = await trigger(api, "newest")
    assert second["cancelled"] == [queued]
    assert (await run_store.get(queued)).status == RunStatus.CANCELLED
    # a running previous run is asked to stop (its owner ends it within a heartbeat)
    claim = await lease_store.claim("default", "w-1", 10)
    assert [run.id for run in claim.runs] == second["created"]
    third = await trigger(api, "newest")
    assert third["cancelled"] == second["created"]
    assert (await run_store.get(second["created"][0])).status == RunStatus.CANCELLING


async def test_buffer_one_keeps_one_fire_and_starts_it_when_the_previous_ends(
    api: httpx.AsyncClient, run_store: RunStore, settings: Settings
) -> None:
    await make(api, "queue-one", cron="0 0 1 1 *", overlap="buffer_one")
    first = (await trigger(api, "queue-one"))["created"][0]
    held = await trigger(api, "queue-one")
    dropped = await trigger(api, "queue-one")
    assert held["buffered"] is True and held["created"] == []
    assert dropped["skipped"] == 1 and dropped["buffered"] is False
    buffered_at = (await api.get("/schedules/queue-one")).json()["buffered_fire_at"]
    assert buffered_at is not None
    reconciler = SchedulePass.for_settings(run_store, settings)
    assert await reconciler.tick() == []  # the previous run is still queued
    await run_store.cancel(first)
    fired = await reconciler.tick()
    assert len(fired) == 1 and len(fired[0].created) == 1
    started = await run_store.get(fired[0].created[0])
    assert started.fire_at is not None
    assert started.fire_at.isoformat().replace("+00:00", "Z") == buffered_at
    assert (await api.get("/schedules/queue-one")).json()["buffered_fire_at"] is None


async def test_a_repeated_backfill_makes_no_second_run_per_fire_time(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    await make(api, "history", cron="0 * * * *", timezone="Europe/Berlin")
    body = {"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T05:00:00Z"}
    first = (await api.post("/schedules/history/backfill", json=body)).json()
    again = (await api.post("/schedules/history/backfill", json=body)).json()
    assert len(first["created"]) == 6
    assert again["created"] == [] and again["skipped"] == 6
    fire_times = sorted(r.fire_at for r in await runs_of(run_store, "history") if r.fire_at)
    assert [t.hour for t in fire_times] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("policy", ["skip", "buffer_one"])
async def test_a_backfill_may_ask_for_its_own_overlap_policy(
    api: httpx.AsyncClient, policy: str
) -> None:
    await make(api, f"bf-{policy}", cron="0 * * * *")
    body = {"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T03:00:00Z", "overlap": policy}
    result = (await api.post(f"/schedules/bf-{policy}/backfill", json=body)).json()
    assert len(result["created"]) == 1  # the first; the rest wait for it or are dropped
    assert result["buffered"] is (policy == "buffer_one")


async def test_buffer_one_starts_the_held_fire_before_a_newer_one_that_comes_first(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    """The previous run ended, and a new fire arrives before the pass that starts buffered
    fires: the held fire runs first, the new one is held in its place — never out of order."""
    await make(api, "in-order", cron="0 0 1 1 *", overlap="buffer_one")
    first = (await trigger(api, "in-order"))["created"][0]
    assert (await trigger(api, "in-order"))["buffered"] is True
    held_at = (await api.get("/schedules/in-order")).json()["buffered_fire_at"]
    await run_store.cancel(first)
    newer = await trigger(api, "in-order")
    assert len(newer["created"]) == 1 and newer["buffered"] is True
    started = await run_store.get(newer["created"][0])
    assert started.fire_at is not None
    assert started.fire_at == datetime.fromisoformat(held_at)
    view = (await api.get("/schedules/in-order")).json()
    assert view["buffered_fire_at"] is not None and view["buffered_fire_at"] != held_at
