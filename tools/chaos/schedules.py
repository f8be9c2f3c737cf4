"""The schedule promise under faults: exactly one run per fire time, and no fire missed.

The soak creates one schedule before the faults start — every second, overlap
``allow``, missed fires ``all`` within a day — and pauses it when they end. Every
worker's reconciler fires it (there is no scheduler process), while workers are
killed, paused and partitioned and Redis restarts. Afterwards, read from Redis:

* ``schedule_fire_doubled``: two stored runs of the schedule name the same fire time;
* ``schedule_fire_off_grid``: a stored run's fire time is not ``anchor + k * interval``,
  or its id is not the one derived from (schedule, fire time);
* ``schedule_fire_missed``: the schedule counted fewer fires than fire times passed
  between its creation and its last fire (or counted some missed or skipped): with
  ``missed=all`` and a day's catch-up window, an outage only delays fires; a
  schedule that never fired at all is this too.

Runs the janitor purged are simply absent: the counts come from the schedule's own
record, which ``fire_schedule`` updates in the same step as it creates each run.
"""

from __future__ import annotations

from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.client import ApiError
from app.store.keys import QueueKeys
from app.store.schedules.store import fire_run_id
from tools.chaos.checker import Snapshot, Violation
from tools.chaos.workload import Api

SCHEDULE_ID = "chaos.every-second"
INTERVAL_S = 1.0


async def start(api: Api) -> None:
    """Create the soak's schedule (a create resent after a lost answer finds it: 409)."""
    run = {"handler": "demo.echo", "input": {"message": "tick"}, "queue": "default"}
    try:
        await api.call(
            lambda client: client.create_schedule(
                SCHEDULE_ID, run, interval_s=INTERVAL_S, overlap="allow", missed="all"
            )
        )
    except ApiError as exc:
        if exc.status != 409:
            raise


async def stop(api: Api) -> None:
    """Pause it once the faults end, so the runs can settle."""
    await api.call(lambda client: client.pause_schedule(SCHEDULE_ID))


def scheduled_ids(snapshot: Snapshot) -> frozenset[str]:
    """The stored runs the soak's schedule made (no client created them)."""
    return frozenset(
        run_id
        for run_id, run in snapshot.runs.items()
        if run.fields.get("schedule_id") == SCHEDULE_ID
    )


async def check(client: aioredis.Redis, prefix: str, snapshot: Snapshot) -> list[Violation]:
    """The promises above, from the schedule's record and the stored runs."""
    keys = QueueKeys(prefix, "default")
    try:
        record = cast(dict[str, str], await client.hgetall(keys.schedule(SCHEDULE_ID)))
    except RedisError as exc:
        return [Violation("schedule_unreadable", SCHEDULE_ID, str(exc))]
    if not record:
        return [Violation("schedule_fire_missed", SCHEDULE_ID, "the schedule is not in Redis")]
    anchor, step = int(record["anchor_ms"]), int(record["interval_ms"])
    found = _check_runs(snapshot, anchor, step)
    fired = int(record.get("fired_count") or 0)
    last = int(record.get("last_fire_ms") or anchor)
    passed = (last - anchor) // step
    missed = int(record.get("missed_count") or 0) + int(record.get("skipped_count") or 0)
    if fired == 0 or fired != passed or missed:
        found.append(
            Violation(
                "schedule_fire_missed",
                SCHEDULE_ID,
                f"{passed} fire times passed up to the last fire; fired {fired}, "
                f"missed or skipped {missed}",
            )
        )
    return found


def _check_runs(snapshot: Snapshot, anchor: int, step: int) -> list[Violation]:
    found: list[Violation] = []
    seen: dict[int, str] = {}
    for run_id in sorted(scheduled_ids(snapshot)):
        fire = int(snapshot.runs[run_id].fields.get("fire_ms") or -1)
        if fire in seen:
            found.append(
                Violation("schedule_fire_doubled", run_id, f"fire {fire} also made {seen[fire]}")
            )
        seen[fire] = run_id
        if (fire - anchor) % step or fire_run_id("default", SCHEDULE_ID, fire) != run_id:
            found.append(Violation("schedule_fire_off_grid", run_id, f"fire time {fire}"))
    return found
