"""Schedules in Redis: their records, the directory that finds them, and firing them.

A schedule lives beside the runs it makes, under its queue's hash tag
(``<tag>:sched:<id>``, see :mod:`app.store.keys`), so one script can both advance it
and create its runs on Redis Cluster. ``<prefix>:schedules`` maps each id to its
queue (the directory: ``GET /schedules/{id}`` needs no queue, and its size is the
``LEASEHOLD_SCHEDULE_MAX`` bound). A schedule's queue is fixed when it is made.

Firing is ``fire_schedule``: a fire's run id is derived from (schedule, fire time)
— :func:`fire_run_id` — and a reconciler's tick acts only while the schedule's due
score is still the fire time it computed from, so any number of reconcilers make
exactly one run per fire time. There is no leader.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from app.cron import Spec
from app.errors import ScheduleConflict, ScheduleLimitReached, ScheduleNotFound
from app.models import MissedFires, Overlap
from app.models.read import Schedule
from app.settings import Settings
from app.store.codec import dumps, ms_to_datetime
from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import ScriptCode, Scripts
from app.store.redis.connection import AsyncRedis
from app.store.runs.store import RunStore
from app.store.schedules.bindings import (
    FIRE_SCHEDULE,
    PUT_SCHEDULE,
    FireArgs,
    FireGroup,
    FireReply,
    PutScheduleArgs,
)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
NEXT_FIRES_SHOWN = 5
LIST_MAX = 200


def fire_run_id(queue: str, schedule_id: str, fire_ms: int) -> str:
    """The run id of one fire: ``<queue>.<ULID>`` whose time is the fire time and whose
    80 random bits are a hash of (schedule, fire time).

    Every reconciler derives the same id for the same fire, so ``fire_schedule``
    never makes a second run for it; the id still sorts by fire time.
    """
    digest = hashlib.sha256(f"{queue}\0{schedule_id}\0{fire_ms}".encode()).digest()
    value = (fire_ms << 80) | int.from_bytes(digest[:10], "big")
    chars = [_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5)]
    return f"{queue}.{''.join(chars)}"


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule's hash fields, decoded: what a tick and the API need."""

    id: str
    queue: str
    spec: Spec
    overlap: Overlap
    missed: MissedFires
    catchup_window_ms: int
    paused: bool
    version: int
    next_fire_ms: int | None
    fields: Mapping[str, str]

    @classmethod
    def from_hash(cls, fields: Mapping[str, str]) -> ScheduleRecord:
        """Decode a schedule's hash (as put_schedule wrote it)."""
        interval = fields.get("interval_ms") or ""
        return cls(
            id=fields["id"],
            queue=fields["queue"],
            spec=Spec(
                cron=fields.get("cron") or None,
                timezone=fields.get("timezone") or "UTC",
                interval_ms=int(interval) if interval else None,
                anchor_ms=int(fields.get("anchor_ms") or 0),
            ),
            overlap=cast(Overlap, fields.get("overlap") or "skip"),
            missed=cast(MissedFires, fields.get("missed") or "skip"),
            catchup_window_ms=int(fields.get("catchup_window_ms") or 0),
            paused=fields.get("paused") == "1",
            version=int(fields.get("version") or 0),
            next_fire_ms=int(fields["next_fire_ms"]) if fields.get("next_fire_ms") else None,
            fields=fields,
        )

    def to_model(self, now_ms: int) -> Schedule:
        """The schedule as the API shows it, with its next fire times from ``now_ms``."""
        f = self.fields
        upcoming: list[int] = []
        if not self.paused and self.next_fire_ms is not None:
            upcoming = [self.next_fire_ms]
            upcoming += self.spec.between(
                max(self.next_fire_ms, now_ms), 2**62, NEXT_FIRES_SHOWN - 1
            )
        created = ms_to_datetime(f.get("created_at"))
        updated = ms_to_datetime(f.get("updated_at"))
        assert created is not None and updated is not None
        interval = self.spec.interval_ms
        return Schedule(
            id=self.id,
            queue=self.queue,
            cron=self.spec.cron,
            timezone=self.spec.timezone,
            interval_s=None if interval is None else interval / 1000,
            overlap=self.overlap,
            missed=self.missed,
            catchup_window_s=self.catchup_window_ms / 1000,
            paused=self.paused,
            version=self.version,
            run=json.loads(f.get("run") or "{}"),
            created_at=created,
            updated_at=updated,
            next_fire_at=ms_to_datetime(self.next_fire_ms) if upcoming else None,
            next_fires=[ms for ms in map(ms_to_datetime, upcoming) if ms is not None],
            last_fire_at=ms_to_datetime(f.get("last_fire_ms")),
            last_run_id=f.get("last_run_id") or None,
            buffered_fire_at=ms_to_datetime(f.get("buffered_fire_ms")),
            fired_count=int(f.get("fired_count") or 0),
            skipped_count=int(f.get("skipped_count") or 0),
            missed_count=int(f.get("missed_count") or 0),
        )


@dataclass(frozen=True)
class Fire:
    """One fire_schedule call's what: its mode, fire times and tick bookkeeping."""

    mode: str  # "tick" | "buffered" | "trigger" | "backfill"
    fires: Sequence[int]
    version: int
    expected_ms: int | None = None
    next_ms: int | None = None
    missed: int = 0
    overlap: Overlap | None = None


class ScheduleStore:
    """Reads, writes and fires schedules on the Redis (and with the settings) of a RunStore.

    A fire makes runs exactly as ``create_run`` does, so it shares the run store's
    client, scripts, prefix, retention, queued TTL and stream cap rather than
    holding copies of them.
    """

    def __init__(self, runs: RunStore, *, max_schedules: int) -> None:
        self.runs = runs
        self.client = runs.client
        self.scripts = runs.scripts
        self.max_schedules = max_schedules
        self.global_keys = GlobalKeys(runs.prefix)

    @classmethod
    def for_settings(
        cls, client: AsyncRedis, scripts: Scripts, settings: Settings
    ) -> ScheduleStore:
        """A store on ``client`` with the run store and schedule bound of ``settings``."""
        runs = RunStore.for_settings(client, scripts, settings)
        return cls(runs, max_schedules=settings.schedule_max)

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return self.runs.keys(queue)

    async def now_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock fire times are judged by."""
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def create(
        self,
        schedule_id: str,
        queue: str,
        fields: Mapping[str, Any],
        *,
        max_schedules: int | None = None,
    ) -> int:
        """Create a schedule; returns its version (1).

        ``fields`` are the record's spec and run options (``next_fire_ms`` among them,
        or absent for none). Raises :class:`ScheduleConflict` when the id exists and
        :class:`ScheduleLimitReached` past ``max_schedules``: the directory entry is
        taken first (HSETNX), so two creates of one id cannot both win.
        """
        directory = self.global_keys.schedules
        bound = self.max_schedules if max_schedules is None else max_schedules
        if await self.client.hlen(directory) >= bound:
            raise ScheduleLimitReached(
                f"{bound} schedules exist (LEASEHOLD_SCHEDULE_MAX); delete one first"
            )
        if not await self.client.hsetnx(directory, schedule_id, queue):
            raise ScheduleConflict(f"schedule {schedule_id!r} exists already")
        try:
            return await self._put(schedule_id, queue, "create", fields, None)
        except BaseException:
            await self.client.hdel(directory, schedule_id)
            raise

    async def update(
        self, schedule_id: str, fields: Mapping[str, Any], expected_version: int | None
    ) -> int:
        """Replace some of a schedule's fields; returns the new version.

        Raises :class:`ScheduleNotFound`, or :class:`ScheduleConflict` when
        ``expected_version`` is not the current one.
        """
        queue = await self.queue_of(schedule_id)
        return await self._put(schedule_id, queue, "update", fields, expected_version)

    async def _put(
        self,
        schedule_id: str,
        queue: str,
        mode: str,
        fields: Mapping[str, Any],
        expected_version: int | None,
    ) -> int:
        record = {k: v for k, v in fields.items() if k != "next_fire_ms"}
        next_fire = fields.get("next_fire_ms")
        args = PutScheduleArgs(
            schedule_id=schedule_id,
            mode=mode,
            expected_version="" if expected_version is None else expected_version,
            fields=dumps(record),
            next_fire_ms="" if next_fire is None else int(next_fire),
        )
        reply = await PUT_SCHEDULE.send(self.scripts, self.client, self.keys(queue), args)
        if reply.code == ScriptCode.NOT_FOUND:
            raise ScheduleNotFound(schedule_id)
        if reply.code == ScriptCode.CONFLICT:
            raise ScheduleConflict(
                f"schedule {schedule_id!r} is at version {reply.version}"
                if mode == "update"
                else f"schedule {schedule_id!r} exists already"
            )
        return reply.version

    async def queue_of(self, schedule_id: str) -> str:
        """The queue a schedule's runs go to; raises :class:`ScheduleNotFound`."""
        queue = await self.client.hget(self.global_keys.schedules, schedule_id)
        if queue is None:
            raise ScheduleNotFound(schedule_id)
        return str(queue)

    async def record(self, schedule_id: str) -> ScheduleRecord:
        """A schedule's record; raises :class:`ScheduleNotFound`."""
        queue = await self.queue_of(schedule_id)
        fields = cast(
            dict[str, str], await self.client.hgetall(self.keys(queue).schedule(schedule_id))
        )
        if not fields:
            raise ScheduleNotFound(schedule_id)
        return ScheduleRecord.from_hash(fields)

    async def record_in(self, queue: str, schedule_id: str) -> ScheduleRecord | None:
        """A schedule's record read from its queue (no directory read), or None if gone."""
        fields = cast(
            dict[str, str], await self.client.hgetall(self.keys(queue).schedule(schedule_id))
        )
        return ScheduleRecord.from_hash(fields) if fields else None

    async def get(self, schedule_id: str) -> Schedule:
        """A schedule with its next fire times; raises :class:`ScheduleNotFound`."""
        return (await self.record(schedule_id)).to_model(await self.now_ms())

    async def list_page(
        self, *, after: str | None, limit: int
    ) -> tuple[list[Schedule], str | None]:
        """Up to ``limit`` schedules by id after ``after``; and the cursor of the next page.

        The directory holds at most ``max_schedules`` ids, so reading them all is bounded.
        """
        directory = cast(dict[str, str], await self.client.hgetall(self.global_keys.schedules))
        ids = sorted(i for i in directory if after is None or i > after)
        page = ids[: min(limit, LIST_MAX)]
        pipe = self.client.pipeline(transaction=False)
        for schedule_id in page:
            pipe.hgetall(self.keys(directory[schedule_id]).schedule(schedule_id))
        replies = cast(list[dict[str, str]], await pipe.execute()) if page else []
        now = await self.now_ms()
        items = [ScheduleRecord.from_hash(f).to_model(now) for f in replies if f]
        more = len(ids) > len(page)
        return items, page[-1] if more and page else None

    async def delete(self, schedule_id: str) -> None:
        """Delete a schedule: nothing more fires; its runs stay. Raises ScheduleNotFound.

        Works when Redis is full (a stop control must): no MULTI, whose queued commands
        Redis refuses at maxmemory, but removals in an order that is safe to stop
        anywhere — out of the due and buffered sets first (it never fires again),
        then the record, then the directory entry — and that a repeat completes.
        """
        keys = self.keys(await self.queue_of(schedule_id))
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(keys.schedule_due, schedule_id)
        pipe.zrem(keys.schedule_buffered, schedule_id)
        pipe.delete(keys.schedule(schedule_id))
        await pipe.execute()
        await self.client.hdel(self.global_keys.schedules, schedule_id)

    async def due(self, queue: str, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Schedules of ``queue`` whose next fire is at or before ``now_ms``: (id, fire ms)."""
        rows = cast(
            list[tuple[str, float]],
            await self.client.zrangebyscore(
                self.keys(queue).schedule_due, "-inf", now_ms, start=0, num=limit, withscores=True
            ),
        )
        return [(str(member), int(score)) for member, score in rows]

    async def buffered(self, queue: str, limit: int) -> list[str]:
        """Schedules of ``queue`` holding a buffer_one fire, oldest fire first."""
        rows = await self.client.zrange(self.keys(queue).schedule_buffered, 0, limit - 1)
        return [str(member) for member in rows]

    async def fire(self, record: ScheduleRecord, fire: Fire) -> FireReply:
        """Send one ``fire_schedule``; the reply says what it created, skipped, buffered.

        A CONFLICT reply (another reconciler fired first, the schedule changed, or it is
        not due by the Redis clock) wrote nothing; the caller moves on.
        """
        queue = record.queue
        keys = self.keys(queue)
        groups = [FireGroup(ms, fire_run_id(queue, record.id, ms)) for ms in fire.fires]
        if fire.mode == "buffered":
            groups = [FireGroup(ms, record.fields.get("buffered_run_id", "")) for ms in fire.fires]
        args = FireArgs(
            schedule_id=record.id,
            mode=fire.mode,
            expected_ms="" if fire.expected_ms is None else fire.expected_ms,
            version=fire.version,
            next_ms="" if fire.next_ms is None else fire.next_ms,
            missed=fire.missed,
            overlap=fire.overlap or "",
            queued_ttl_ms=self.runs.queued_ttl_ms,
            maxlen=self.runs.events_maxlen,
            wake_channel=keys.wake_channel,
            cancel_channel=keys.cancel_channel,
            retention=self.runs.retention.script_arg(),
            groups=groups,
        )
        reply = await FIRE_SCHEDULE.send(self.scripts, self.client, keys, args)
        if reply.code == ScriptCode.NOT_FOUND:
            raise ScheduleNotFound(record.id)
        return reply
