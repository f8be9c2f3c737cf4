"""The schedule pass: every reconciler, every ``LEASEHOLD_SCHEDULE_TICK_S``, fires what is due.

There is no scheduler process and no leader. Each pass reads the Redis clock, and
for each queue the schedules whose next fire time has come (``…:sched_due``); for
each it computes, from the spec it read, the fire times in ``[next fire, now]`` and
what the missed-fire policy keeps:

* ``skip``: only fires at most ``LEASEHOLD_SCHEDULE_GRACE_S`` old (on time); older
  ones are counted missed;
* ``latest``: only the newest, if within the schedule's catch-up window;
* ``all``: every fire within the catch-up window, oldest first, at most
  ``LEASEHOLD_SCHEDULE_FIRES_PER_TICK_MAX`` per pass (the next pass goes on).

then sends one ``fire_schedule`` naming the fire time it read. The script acts only
if that is still the schedule's due score (and the version it computed from is still
current), so when several reconcilers race, one wins and the others write nothing:
exactly one run per fire time. The same pass starts ``buffer_one`` fires whose
previous run has ended.

Fires are admitted like creates (:mod:`app.store.admission`), judged on the runs
they will write, all of a pass's fires of one schedule together: past the
high-water mark nothing fires, the schedule stays due, and a later pass fires what
its missed-fire policy still keeps (counted ``refused`` meanwhile, logged once per
schedule until it fires again). So no schedule can fill Redis, and every stop
control (pause, delete) still works when it is full.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from app.errors import MemoryPressure
from app.settings import Settings
from app.store.admission import MemoryAdmission, create_cost_bytes
from app.store.runs.store import RunStore
from app.store.schedules.bindings import FireReply
from app.store.schedules.store import Fire, ScheduleRecord, ScheduleStore
from app.telemetry.metrics import SCHEDULE_FIRES

log = logging.getLogger(__name__)

JITTER = 0.2
DUE_BATCH = 100
# fire times one pass looks at for one schedule (counting missed ones after a long
# outage); past it the rest are counted on the next pass
SCAN_MAX = 100_000


@dataclass(frozen=True)
class TickPlan:
    """What one pass does for one due schedule: fire these, count those missed, next."""

    fires: list[int]
    missed: int
    next_ms: int | None


def plan_tick(record: ScheduleRecord, now_ms: int, *, grace_ms: int, limit: int) -> TickPlan:
    """The fires of ``record`` due by ``now_ms`` that its missed-fire policy keeps.

    Pure: the same record and clock give the same plan in every reconciler.
    """
    first = record.next_fire_ms
    assert first is not None
    due = [first, *record.spec.between(first, now_ms, SCAN_MAX - 1)]
    window = grace_ms if record.missed == "skip" else max(grace_ms, record.catchup_window_ms)
    kept = [ms for ms in due if now_ms - ms <= window]
    if record.missed == "latest":
        kept = kept[-1:]
    elif record.missed == "all" and len(kept) > limit:
        # catch up over several passes: the rest stay due, starting at the first not fired
        fired = kept[:limit]
        missed = sum(1 for ms in due if ms < fired[0])
        return TickPlan(fired, missed, kept[limit])
    kept = kept[:limit]
    last = due[-1]
    return TickPlan(kept, len(due) - len(kept), record.spec.next_after(max(last, now_ms)))


class SchedulePass:
    """Fires due schedules on every declared queue; any number may run at once."""

    @classmethod
    def for_settings(cls, run_store: RunStore, settings: Settings) -> SchedulePass:
        """A pass on ``run_store``'s Redis over every declared queue, bounded by ``settings``."""
        return cls(
            store=ScheduleStore(run_store, max_schedules=settings.schedule_max),
            queues=run_store.queues,
            grace_ms=round(settings.schedule_grace_s * 1000),
            fires_per_tick_max=settings.schedule_fires_per_tick_max,
            admission=MemoryAdmission(
                run_store.client,
                high_water=settings.memory_high_water,
                interval_s=settings.memory_check_interval_s,
            ),
        )

    def __init__(
        self,
        *,
        store: ScheduleStore,
        queues: Callable[[], Awaitable[list[str]]],
        grace_ms: int,
        fires_per_tick_max: int,
        admission: MemoryAdmission,
    ) -> None:
        self._store = store
        self._queues = queues
        self._grace_ms = grace_ms
        self._limit = fires_per_tick_max
        self._admission = admission
        self._refused: set[str] = set()  # schedules whose fires memory refuses (logged once)

    async def run_forever(self, interval_s: float) -> None:
        """Pass, sleep a jittered interval, repeat; survives Redis outages."""
        while True:
            await asyncio.sleep(interval_s * random.uniform(1 - JITTER, 1 + JITTER))
            try:
                await self.tick()
            except (RedisError, OSError) as exc:
                log.warning("schedule pass failed: %s", exc)

    async def tick(self) -> list[FireReply]:
        """One pass over every queue's due and buffered schedules; returns what fired."""
        now = await self._store.now_ms()
        done: list[FireReply] = []
        for queue in await self._queues():
            for schedule_id, due_ms in await self._store.due(queue, now, DUE_BATCH):
                reply = await self._fire_due(queue, schedule_id, due_ms, now)
                if reply is not None:
                    done.append(reply)
            for schedule_id in await self._store.buffered(queue, DUE_BATCH):
                reply = await self._fire_buffered(queue, schedule_id)
                if reply is not None:
                    done.append(reply)
        return done

    async def _fire_due(
        self, queue: str, schedule_id: str, due_ms: int, now: int
    ) -> FireReply | None:
        record = await self._store.record_in(queue, schedule_id)
        if record is None:
            self._refused.discard(schedule_id)
            return None  # deleted since the due read
        if record.next_fire_ms != due_ms:
            return None  # changed since the due read: the next pass sees it
        plan = plan_tick(record, now, grace_ms=self._grace_ms, limit=self._limit)
        if not await self._admitted(record, len(plan.fires)):
            return None
        fire = Fire(
            "tick",
            plan.fires,
            record.version,
            expected_ms=due_ms,
            next_ms=plan.next_ms,
            missed=plan.missed,
        )
        return self._counted(record, await self._store.fire(record, fire), plan.missed)

    async def _fire_buffered(self, queue: str, schedule_id: str) -> FireReply | None:
        record = await self._store.record_in(queue, schedule_id)
        held = record.fields.get("buffered_fire_ms") if record else None
        if record is None or not held or not await self._admitted(record, 1):
            return None
        reply = await self._store.fire(record, Fire("buffered", [int(held)], record.version))
        return self._counted(record, reply, 0)

    async def _admitted(self, record: ScheduleRecord, fires: int) -> bool:
        """Whether memory has room for ``fires`` runs of ``record``, all together.

        Refused: nothing is written, the schedule stays due, and the refusal is counted
        (and logged the first time in a row for this schedule).
        """
        if fires == 0:
            return True  # only missed fires to count: nothing grows
        cost = create_cost_bytes(len(record.fields.get("input", "").encode())) * fires
        try:
            await self._admission.admit(cost)
        except MemoryPressure as exc:
            SCHEDULE_FIRES.labels(record.queue, "refused").inc(fires)
            if record.id not in self._refused:
                self._refused.add(record.id)
                log.warning("schedule %s does not fire: %s", record.id, exc)
            return False
        if record.id in self._refused:
            self._refused.discard(record.id)
            log.info("schedule %s fires again: Redis memory is below the mark", record.id)
        return True

    @staticmethod
    def _counted(record: ScheduleRecord, reply: FireReply, missed: int) -> FireReply | None:
        if reply.code != "OK":
            return None  # another reconciler got there first, or the schedule changed
        SCHEDULE_FIRES.labels(record.queue, "created").inc(len(reply.created))
        SCHEDULE_FIRES.labels(record.queue, "skipped").inc(reply.skipped)
        SCHEDULE_FIRES.labels(record.queue, "missed").inc(missed)
        if reply.buffered:
            SCHEDULE_FIRES.labels(record.queue, "buffered").inc()
        for run_id in reply.created:
            log.info("schedule %s fired", record.id, extra={"run_id": run_id})
        return reply
