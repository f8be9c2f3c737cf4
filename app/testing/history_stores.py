"""The stores a replay's helpers write through: each answers from a run's history, writes nothing.

A replay (:mod:`app.testing.replay`) runs the handler on the worker's own helpers —
:class:`~app.executor.effects.EffectLedger` (effects, checkpoints, patches, and the
drift check), :class:`~app.executor.waits.Waits`, :class:`~app.executor.children.Family`
and :class:`~app.executor.events.EventSink` — so every step is named, numbered,
validated and compared exactly as a live attempt does. Only the store calls under them
change: here each one answers what the store answered the live run, from the records
the history holds, and writes nothing. A step the history holds no outcome for is the
*frontier*: where the run would go on live (a side effect to call, a wait still
waiting). It raises :class:`ReplayFrontier`, which ends the replay successfully there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.executor.children import JOIN_COUNTER
from app.models.history import RunHistory
from app.store.family.children import JoinAnswer, JoinOutcome, SpawnAnswer, SpawnStep
from app.store.leases.store import Lease
from app.store.progress.store import (
    POSITION_ENTRY,
    EffectAnswer,
    EffectCall,
    EffectStart,
    ReplayStart,
)
from app.store.waits.store import WaitAnswer, WaitCall, WaitOutcome

# what a record's status is once its step is over (park_run, join_children, start_effect)
DONE, TIMED_OUT = "done", "timed_out"


class ReplayFrontier(BaseException):
    """The handler reached a step the history holds no outcome for: the replay ends here.

    A BaseException, like :class:`~app.executor.reasons.RunParked`, so the handler's
    ``except Exception`` does not swallow it.
    """

    def __init__(self, step: str, why: str) -> None:
        super().__init__(f"{step}: {why}")
        self.step = step
        self.why = why


class HistoryProgress:
    """What :class:`~app.store.progress.store.ProgressStore` answers, from the history."""

    def __init__(self, history: RunHistory) -> None:
        self._history = history

    async def replay_start(self, queue: str, run_id: str) -> ReplayStart:
        """As the live read: the last checkpoint's counts and position, the steps from there."""
        counts = dict(self._history.run.effect_seq)
        position = int(counts.pop(POSITION_ENTRY, 0))
        recorded = {n: step for n, step in enumerate(self._history.steps) if step and n >= position}
        return ReplayStart(counts, self._history.run.retry_root, position, recorded)

    async def start_effect(self, lease: Lease, call: EffectCall) -> EffectStart:
        """The recorded result; an effect without one is the frontier (it would be called)."""
        record = self._history.effects.get(call.field)
        if record is None:
            raise ReplayFrontier(f"e|{call.field}", "not recorded: the effect would be called")
        if record.get("status") != DONE or not isinstance(record.get("result"), str):
            raise ReplayFrontier(
                f"e|{call.field}", f"recorded without a result (status {record.get('status')!r})"
            )
        return EffectStart(EffectAnswer.REPLAYED, result_json=record["result"])

    async def checkpoint(self, lease: Lease, *, state_json: str, effect_seq_json: str) -> int:
        """Writes nothing: the state is the handler's to read back (the ledger returns it)."""
        return 0

    async def note_patch(self, lease: Lease, patch_id: str, *, proposed: bool) -> bool:
        """The run's recorded decision, else the one a live attempt would record now."""
        return self._history.patches.get(patch_id, proposed)

    async def report_drift(self, lease: Lease, details_json: str) -> None:
        """Parks nothing: the ledger raises the same VersionDrift after this."""


class HistoryWaits:
    """What :class:`~app.store.waits.store.WaitStore` answers a wait, from the history."""

    max_waits = 0  # never answers FULL: a replay records no new step

    def __init__(self, history: RunHistory) -> None:
        self._history = history

    async def park(self, lease: Lease, call: WaitCall) -> WaitAnswer:
        """The recorded outcome; a wait not over is the frontier (the run waits there)."""
        record = self._history.waits.get(call.step)
        if not isinstance(record, dict):
            raise ReplayFrontier(f"w|{call.step}", "not recorded: the run would wait here")
        status = record.get("status")
        if status == DONE:
            return WaitAnswer(WaitOutcome.OVER, payload_json=str(record.get("payload") or ""))
        if status == TIMED_OUT:
            return WaitAnswer(WaitOutcome.TIMED_OUT, until_ms=_int_or_none(record, "until_ms"))
        raise ReplayFrontier(f"w|{call.step}", "not over in the history: the run waits here")


class HistoryChildren:
    """What :class:`~app.store.family.children.ChildStore` answers spawns and joins."""

    max_waits = 0

    def __init__(self, history: RunHistory) -> None:
        self._history = history

    async def record_spawn(self, lease: Lease, *, ordinal: int, **_: Any) -> SpawnStep:
        """The recorded child (``ended``: nothing is created); none is the frontier."""
        child_id = self._history.family.get(f"spawn:{ordinal}")
        if child_id is None:
            raise ReplayFrontier(f"s|spawn:{ordinal}", "not recorded: the child would be created")
        return SpawnStep(SpawnAnswer.REPLAYED, child_id, "", 0, None, None, ended=True)

    async def create_child(self, new: Any) -> None:
        """Never reached (a replayed spawn is ``ended``); creates nothing if it were."""

    async def join(
        self, lease: Lease, *, ordinal: int, child_ids: list[str], **_: Any
    ) -> JoinAnswer:
        """The recorded join's outcomes, as the children's ends delivered them."""
        step = f"{JOIN_COUNTER}{ordinal}"
        record = self._history.waits.get(step)
        status = record.get("status") if isinstance(record, dict) else None
        if status == DONE:
            outcomes = [self._history.family.get(f"out:{child}", "") for child in child_ids]
            return JoinAnswer(JoinOutcome.OVER, outcomes)
        if status == TIMED_OUT:
            return JoinAnswer(JoinOutcome.TIMED_OUT, [], until_ms=_int_or_none(record, "until_ms"))
        raise ReplayFrontier(f"j|{step}", "not over in the history: the run waits here")


class HistoryQueues:
    """Every queue is declared: a replayed spawn's queue was, when it was recorded."""

    async def is_declared(self, queue: str) -> bool:
        return True


class HistoryEvents:
    """Takes the handler's events instead of appending them: a report lists them."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, str]] = []

    async def append_events(self, lease: Lease, batch: Sequence[tuple[str, str]]) -> str:
        self.emitted.extend(batch)
        return ""


def _int_or_none(record: Any, field: str) -> int | None:
    value = record.get(field) if isinstance(record, dict) else None
    return int(value) if isinstance(value, int | float) else None
