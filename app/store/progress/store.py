"""Executor-side transitions that make a run resumable: checkpoints and effect records.

Like every worker write, each one carries the run's
:class:`~app.store.leases.store.Lease` and is answered LOST once another owner has
taken the run. An effect's record lives in the run's effects hash under
``<name>:<ordinal>``; its value is a small JSON record whose ``result`` is the side
effect's JSON result *as text*, so Lua never decodes (and never re-rounds) a handler's
numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from app.store.context import Store
from app.store.leases.store import Lease
from app.store.lua.scripts import ScriptCode
from app.store.lua.transition import raise_for
from app.store.progress.bindings import (
    CHECKPOINT_RUN,
    NOTE_PATCH,
    RECORD_EFFECT,
    REPORT_DRIFT,
    START_EFFECT,
    CheckpointArgs,
    DriftArgs,
    PatchArgs,
    RecordEffectArgs,
    StartEffectArgs,
)

# the effect_seq entry (beside the per-name counts) holding the step position a
# checkpoint was taken at: a name an effect cannot have
POSITION_ENTRY = "~position"
# the effects-hash fields of the step log (includes/steps.lua): '~<position>', '~n'
STEP_FIELD, STEP_COUNT_FIELD = "~", "~n"


@dataclass(frozen=True)
class ReplayStart:
    """Where an attempt's step numbering starts, and what the run recorded from there."""

    counts: dict[str, int]  # calls per effect name / wait / spawn counter so far
    key_root: str  # a re-run's first run ('' for this run)
    position: int  # the step position of the last checkpoint (0 before any)
    recorded: dict[int, str]  # position -> '<kind>|<field>' of each step noted since


class EffectOutcome(StrEnum):
    """What record_effect writes: the result, or that the effect certainly did not happen."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"


@dataclass(frozen=True)
class EffectCall:
    """One ``ctx.effect`` call: its place in the run and the key handed to the side effect."""

    run_id: str
    name: str
    ordinal: int
    idempotent: bool
    # the run whose id starts the key: the first run of a retry chain (store/reruns.py),
    # so a re-run hands a side effect the key the first run would have; '' for this run
    key_root: str = ""
    # its place among the run's steps (the drift check's record); None: not noted
    position: int | None = None

    @property
    def field(self) -> str:
        """Its field in the run's effects hash."""
        return f"{self.name}:{self.ordinal}"

    @property
    def key(self) -> str:
        """The idempotency key: the same on every attempt, and every re-run, of this call."""
        return f"{self.key_root or self.run_id}:{self.name}:{self.ordinal}"


class EffectAnswer(StrEnum):
    """What start_effect found: run the side effect, its recorded result, or an unknown one."""

    STARTED = "OK"
    REPLAYED = "REPLAYED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class EffectStart:
    """What start_effect answered (fenced out is :class:`~app.errors.LeaseLost`, raised).

    STARTED: run the side effect (``starts`` counts this start); REPLAYED: it ran
    before, ``result_json`` is its recorded result; UNKNOWN: it started before
    without an outcome and the run is now parked (``record`` is the evidence).
    """

    answer: EffectAnswer
    starts: int = 0
    result_json: str = ""
    record: dict[str, Any] | None = None


class ProgressStore(Store):
    """Writes checkpoints and effect records on a :class:`StoreContext`."""

    async def checkpoint(self, lease: Lease, *, state_json: str, effect_seq_json: str) -> int:
        """Replace the run's state; returns the checkpoint's sequence number.

        ``effect_seq_json`` is the per-name count of effect calls at this point ('' keeps
        the stored counts), written with the state so a resumed attempt numbers its next
        effects as this one would have. Raises :class:`~app.errors.LeaseLost` when
        fenced out (nothing written).
        """
        args = CheckpointArgs(
            lease.owner_id, lease.fence, state_json, effect_seq_json, self.ctx.events_maxlen
        )
        keys = self.keys(lease.queue)
        reply = await CHECKPOINT_RUN.send(self.scripts, self.client, keys, args, lease.run_id)
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)
        return int(reply.value)

    async def effect_seq(self, queue: str, run_id: str) -> dict[str, int]:
        """Effect calls per name as of the last checkpoint (empty before any)."""
        return (await self.effect_start(queue, run_id))[0]

    async def effect_start(self, queue: str, run_id: str) -> tuple[dict[str, int], str]:
        """Where an attempt's effect numbering starts: counts per name, and the key root."""
        start = await self.replay_start(queue, run_id)
        return start.counts, start.key_root

    async def replay_start(self, queue: str, run_id: str) -> ReplayStart:
        """Where an attempt's step numbering starts and the steps recorded from there.

        The counts and position are the last checkpoint's (empty, 0 before any); the key
        root is the first run of the run's retry chain ('' unless it is a re-run). One
        round trip, and a second only when steps were recorded past the checkpoint.
        """
        keys = self.keys(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.run(run_id), ["effect_seq", "retry_root"])
            pipe.hget(keys.effects(run_id), STEP_COUNT_FIELD)
            (raw, root), noted = await pipe.execute()
        counts = cast(dict[str, int], json.loads(raw)) if raw else {}
        position = int(counts.pop(POSITION_ENTRY, 0))
        recorded: dict[int, str] = {}
        last = int(noted or 0)
        if last > position:
            fields = [f"{STEP_FIELD}{n}" for n in range(position, last)]
            values = cast(list[str | None], await self.client.hmget(keys.effects(run_id), fields))
            recorded = {
                n: value for n, value in zip(range(position, last), values, strict=True) if value
            }
        return ReplayStart(counts, root or "", position, recorded)

    async def note_patch(self, lease: Lease, patch_id: str, *, proposed: bool) -> bool:
        """Which side of change ``patch_id`` the run takes: its first decision (this
        ``proposed`` one, or an earlier attempt's). Raises LeaseLost when fenced out."""
        args = PatchArgs(
            lease.owner_id, lease.fence, patch_id, int(proposed), self.ctx.events_maxlen
        )
        keys = self.keys(lease.queue)
        reply = await NOTE_PATCH.send(self.scripts, self.client, keys, args, lease.run_id)
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)
        return reply.value == "1"

    async def report_drift(self, lease: Lease, details_json: str) -> None:
        """Park the run in ``reconciliation_required`` (code ``version_drift``).

        Raises :class:`~app.errors.LeaseLost` when fenced out (nothing written).
        """
        args = DriftArgs(
            lease.owner_id, lease.fence, lease.run_id, details_json, self.ctx.events_maxlen
        )
        reply = await REPORT_DRIFT.send(self.scripts, self.client, self.keys(lease.queue), args)
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)

    async def start_effect(self, lease: Lease, call: EffectCall) -> EffectStart:
        """Open the effect's record, or find it; see :class:`EffectStart` for the answers.

        Raises :class:`~app.errors.LeaseLost` when fenced out (nothing written).
        """
        args = StartEffectArgs(
            owner_id=lease.owner_id,
            fence=lease.fence,
            run_id=lease.run_id,
            field=call.field,
            key=call.key,
            name=call.name,
            ordinal=call.ordinal,
            idempotent=1 if call.idempotent else 0,
            maxlen=self.ctx.events_maxlen,
            position="" if call.position is None else call.position,
        )
        reply = await START_EFFECT.send(self.scripts, self.client, self.keys(lease.queue), args)
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)
        answer = EffectAnswer(reply.code)
        if answer == EffectAnswer.STARTED:
            return EffectStart(answer, starts=int(reply.value))
        if answer == EffectAnswer.REPLAYED:
            return EffectStart(answer, result_json=reply.value)
        return EffectStart(answer, record=json.loads(reply.value))

    async def record_effect(
        self, lease: Lease, call: EffectCall, outcome: EffectOutcome, result_json: str = ""
    ) -> bool:
        """Record a started effect's outcome; False when it was never started (nothing written).

        Raises :class:`~app.errors.LeaseLost` when fenced out. Recording it again
        (same owner and fence: a retry after a lost reply) answers True.
        """
        args = RecordEffectArgs(
            lease.owner_id,
            lease.fence,
            call.field,
            outcome.value,
            result_json,
            self.ctx.events_maxlen,
        )
        keys = self.keys(lease.queue)
        reply = await RECORD_EFFECT.send(self.scripts, self.client, keys, args, lease.run_id)
        if reply.code == ScriptCode.INVALID:
            return False  # no started record under this field: nothing to record
        raise_for(reply.code, run_id=lease.run_id, fence=lease.fence)
        return True

    async def effects(self, queue: str, run_id: str) -> dict[str, dict[str, Any]]:
        """Every effect record of a run by field, results decoded (for inspection)."""
        raw = cast(dict[str, str], await self.client.hgetall(self.keys(queue).effects(run_id)))
        records = {}
        for field, value in raw.items():
            if field.startswith(STEP_FIELD):
                continue  # the step log (includes/steps.lua), not an effect
            record = json.loads(value)
            if "result" in record:
                record["result"] = json.loads(record["result"])
            records[field] = record
        return records
