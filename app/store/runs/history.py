"""Reading a run's history: its record, step log, step records and events, in one read.

What :class:`~app.models.history.RunHistory` holds and why is said there. Here: where
each part lives, and the bounds. The step records (effects, waits, family) are read
whole or not at all — a replay of part of them would report drift where there is
none — so a run holding more than :data:`MAX_HISTORY_RECORDS` of them is refused
(:class:`~app.errors.HistoryTooLarge`) after one cheap count; its events are cut at
``max_events`` instead (``events_truncated``), since a replay does not read them.
"""

from __future__ import annotations

import json
from typing import Any, cast

from app.errors import HistoryTooLarge, RunNotFound
from app.models.history import HistoryRun, RunHistory
from app.store.codec import event_from_entry
from app.store.context import Store
from app.store.keys import queue_of_run
from app.store.progress.store import STEP_COUNT_FIELD, STEP_FIELD

# the most effect, wait and family fields one history holds (each record is bounded by
# LEASEHOLD_MAX_CHECKPOINT_BYTES / LEASEHOLD_MAX_EVENT_BYTES)
MAX_HISTORY_RECORDS = 10_000
# the effects-hash field prefix of a patch decision (note_patch-3.lua)
PATCH_FIELD = "~patch:"
_RUN_FIELDS = (
    "handler",
    "status",
    "attempt",
    "build_id",
    "input",
    "state",
    "resume_input",
    "effect_seq",
    "retry_root",
)


class RunHistoryReader(Store):
    """Reads one run's history for ``GET /runs/{id}/history``."""

    async def read(self, run_id: str, *, max_events: int) -> RunHistory:
        """The run's history, its events cut at ``max_events``.

        Raises :class:`RunNotFound` (also for a malformed id) and
        :class:`HistoryTooLarge` (nothing read past the counts).
        """
        queue = queue_of_run(run_id)
        keys = self.keys(queue)
        records = (keys.effects(run_id), keys.waits(run_id), keys.family(run_id))
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.run(run_id), list(_RUN_FIELDS))
            for key in records:
                pipe.hlen(key)
            fields, *counts = await pipe.execute()
        record = dict(zip(_RUN_FIELDS, cast(list[str | None], fields), strict=True))
        if record["handler"] is None:
            raise RunNotFound(run_id)
        total = sum(int(count) for count in counts)
        if total > MAX_HISTORY_RECORDS:
            raise HistoryTooLarge(run_id, total, MAX_HISTORY_RECORDS)
        async with self.client.pipeline(transaction=False) as pipe:
            for key in records:
                pipe.hgetall(key)
            pipe.xrange(keys.events(run_id), "-", "+", count=max_events + 1)
            effects, waits, family, entries = await pipe.execute()
        events = [event_from_entry(run_id, entry_id, data) for entry_id, data in entries]
        steps, effect_records, patches = _progress(cast(dict[str, str], effects))
        return RunHistory(
            run=_history_run(run_id, queue, record),
            steps=steps,
            effects=effect_records,
            patches=patches,
            waits={step: json.loads(value) for step, value in waits.items()},
            family=family,
            events=events[:max_events],
            events_truncated=len(events) > max_events,
        )


def _history_run(run_id: str, queue: str, record: dict[str, str | None]) -> HistoryRun:
    return HistoryRun(
        id=run_id,
        queue=queue,
        handler=record["handler"] or "",
        status=record["status"] or "",
        attempt=int(record["attempt"] or 0),
        build_id=record["build_id"] or None,
        input=_json(record["input"]),
        state=_json(record["state"]),
        resume_input=_json(record["resume_input"]),
        effect_seq=_json(record["effect_seq"]) or {},
        retry_root=record["retry_root"] or "",
    )


def _json(raw: str | None) -> Any:
    return json.loads(raw) if raw else None


def _progress(
    raw: dict[str, str],
) -> tuple[list[str | None], dict[str, dict[str, Any]], dict[str, bool]]:
    """The effects hash's three parts: the step log by position (includes/steps.lua), the
    effect records as stored, and the patch decisions (note_patch: ``~patch:<id>``)."""
    noted = int(raw.get(STEP_COUNT_FIELD) or 0)
    steps = [raw.get(f"{STEP_FIELD}{n}") for n in range(min(noted, MAX_HISTORY_RECORDS))]
    effects = {
        field: json.loads(value) for field, value in raw.items() if not field.startswith(STEP_FIELD)
    }
    patches = {
        field[len(PATCH_FIELD) :]: value == "1"
        for field, value in raw.items()
        if field.startswith(PATCH_FIELD)
    }
    return steps, effects, patches
