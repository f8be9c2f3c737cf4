"""The invariant checker: what must hold after any chaos, read from Redis and from the clients.

It reads every run of the deployment straight from Redis (the record with
``HGETALL``, the event stream with ``XRANGE``: no API in between) and compares
it with what the harness's clients saw and what the side channel counted:

* ``run_unknown`` / ``run_missing`` / ``create_unanswered``: every run created is in
  Redis (unless the purge/delete workload took it: :mod:`tools.chaos.promises`
  accounts for those), and every run in Redis was created by a client (no
  duplicate from a retried create);
* ``not_settled``: every run is terminal or parked (``waiting_human``,
  ``reconciliation_required``) once the system had time to settle; the detail
  says whether it still holds a live lease;
* ``parked_holds_lease``: a run parked without an owner (``waiting``: a durable
  sleep or signal wait; ``waiting_human``, ``reconciliation_required``) holds no
  lease: parking gave it back in the same script;
* ``terminal_events`` / ``terminal_not_last`` / ``terminal_mismatch``: a terminal
  run has exactly one terminal event, last in its stream, naming its status; a
  parked run none, and its stream ends with the event that parked it;
* ``terminal_changed``: a terminal run looks the same when read again later;
* ``fence_backwards``: fences in a run's stream never decrease, so no owner wrote
  after another took the run over;
* ``stale_write_accepted``: the same, said of the owners the harness made stale
  (paused, partitioned): after a reconciler took a run from one, no event carries
  that owner's fence (their rejected writes are counted from their logs);
* ``stale_output``: a succeeded run's output was produced by its last claim (owner
  and fence), not by an earlier, fenced-out owner;
* ``effect_repeated``: a non-idempotent effect's function ran at most once per
  key (counted by the side channel, not by Leasehold);
* ``schedule_fire_*``: one run per fire time of the soak's schedule, none missed
  (:mod:`tools.chaos.schedules`);
* ``follow_*``: every SSE follower received each event exactly once, in stream
  order: its events are the stored stream (a prefix of it, for a run that did
  not end) — whatever reconnections it went through.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis.asyncio as aioredis

from app.models import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES, RunStatus
from app.store.keys import GlobalKeys, QueueKeys
from tools.chaos.handlers import read_executions
from tools.chaos.workload import Follow, Tracked

PARKED = {RunStatus.WAITING_HUMAN.value, RunStatus.RECONCILIATION_REQUIRED.value}
TERMINAL = {status.value for status in TERMINAL_STATUSES}


@dataclass(frozen=True)
class Event:
    """One stored event: its stream id, type, fence and data."""

    id: str
    type: str
    fence: int
    data: dict[str, Any]


@dataclass
class StoredRun:
    """A run as Redis holds it: the record's fields and its whole event stream."""

    id: str
    fields: dict[str, str]
    events: list[Event]

    @property
    def status(self) -> str:
        """Its status field."""
        return self.fields.get("status", "")

    def signature(self) -> tuple[str, str, str, int]:
        """What must not change once the run is terminal."""
        return (
            self.status,
            self.fields.get("finished_at", ""),
            self.fields.get("last_event_id", ""),
            len(self.events),
        )


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which, on which run, and what was seen."""

    kind: str
    run_id: str
    detail: str


@dataclass
class Snapshot:
    """Every run of the deployment, read from Redis at one moment (Redis clock ``now_ms``)."""

    runs: dict[str, StoredRun]
    now_ms: int
    leases: dict[str, int] = field(default_factory=dict)  # run id -> lease expiry ms
    # run id -> when its durable wait ends (the queues' `waiting` index, GET /queues' count)
    waiting: dict[str, float] = field(default_factory=dict)


async def take_snapshot(client: aioredis.Redis, prefix: str) -> Snapshot:
    """Read every run (record + stream) and every lease from Redis."""
    seconds, micros = await client.time()
    snapshot = Snapshot({}, int(seconds) * 1000 + int(micros) // 1000)
    for queue in sorted(await client.smembers(GlobalKeys(prefix).queues)):
        keys = QueueKeys(prefix, queue)
        ids = cast(list[str], await client.zrange(keys.runs, 0, -1))
        for start in range(0, len(ids), 200):
            await _read_runs(client, keys, ids[start : start + 200], snapshot)
        for run_id, expiry in await client.zrange(keys.leases, 0, -1, withscores=True):
            snapshot.leases[run_id] = int(expiry)
        for run_id, until in await client.zrange(keys.waiting, 0, -1, withscores=True):
            snapshot.waiting[run_id] = until
    return snapshot


async def _read_runs(
    client: aioredis.Redis, keys: QueueKeys, ids: list[str], snapshot: Snapshot
) -> None:
    pipe = client.pipeline(transaction=False)
    for run_id in ids:
        pipe.hgetall(keys.run(run_id))
        pipe.xrange(keys.events(run_id), "-", "+")
    replies = await pipe.execute()
    for i, run_id in enumerate(ids):
        fields, entries = replies[2 * i], replies[2 * i + 1]
        events = [
            Event(
                entry_id, raw["type"], int(raw.get("fence", 0)), json.loads(raw.get("data", "{}"))
            )
            for entry_id, raw in entries
        ]
        snapshot.runs[run_id] = StoredRun(run_id, fields, events)


def check_runs_known(
    snapshot: Snapshot,
    tracked: list[Tracked],
    accounted: frozenset[str] = frozenset(),
    scheduled: frozenset[str] = frozenset(),
) -> list[Violation]:
    """Every create was answered and stored; nothing is stored that nobody created.

    ``accounted`` are created runs whose absence is judged elsewhere (deleted);
    ``scheduled`` the runs a schedule made (judged by :mod:`tools.chaos.schedules`).
    """
    found: list[Violation] = []
    created = {t.run_id for t in tracked if t.run_id} | scheduled
    for t in tracked:
        if t.run_id is None:
            found.append(Violation("create_unanswered", t.key, t.error or "no answer"))
        elif t.run_id not in snapshot.runs and t.run_id not in accounted:
            found.append(Violation("run_missing", t.run_id, "created, but not in Redis"))
    for run_id in sorted(set(snapshot.runs) - created):
        found.append(Violation("run_unknown", run_id, "in Redis, but no client created it"))
    return found


def check_settled(snapshot: Snapshot) -> list[Violation]:
    """Every run is terminal or parked; says whether an unsettled one has a live lease."""
    found = []
    for run in snapshot.runs.values():
        if run.status in TERMINAL or run.status in PARKED:
            continue
        expiry = snapshot.leases.get(run.id)
        lease = "no lease" if expiry is None else f"lease expires in {expiry - snapshot.now_ms} ms"
        found.append(Violation("not_settled", run.id, f"status {run.status}, {lease}"))
    return found


def check_no_drift(snapshot: Snapshot) -> list[Violation]:
    """Every build runs the same code here: a run parked for version_drift is the drift
    check misfiring (a step numbered differently across a takeover, a lost reply, a
    deploy), or a replay that did take another step."""
    return [
        Violation("false_drift", run.id, run.fields.get("error", "")[:300])
        for run in snapshot.runs.values()
        if '"version_drift"' in run.fields.get("error", "")
    ]


def check_pinned_builds(snapshot: Snapshot) -> list[Violation]:
    """A pinned run is claimed only by workers of the build it is pinned to: its first
    claim's, until an `upgraded` event moves it (to a build, or to none: the next claim
    pins it again)."""
    found = []
    for run in snapshot.runs.values():
        if run.fields.get("versioning") != "pinned":
            continue
        pin: str | None = None
        for event in run.events:
            if event.type == "upgraded":
                pin = event.data.get("to")
            elif event.type == "claimed":
                build = event.data.get("build_id")
                if pin is not None and build != pin:
                    detail = f"claimed by build {build} while pinned to {pin} (fence {event.fence})"
                    found.append(Violation("pinned_elsewhere", run.id, detail))
                pin = pin or build
    return found


def runs_across_builds(snapshot: Snapshot) -> int:
    """How many runs were claimed under more than one build (what a deploy moved)."""
    moved = 0
    for run in snapshot.runs.values():
        builds = {event.data.get("build_id") for event in run.events if event.type == "claimed"}
        moved += len(builds - {None}) > 1
    return moved


UNOWNED = {*PARKED, RunStatus.WAITING.value}


def check_waiting_index(snapshot: Snapshot) -> list[Violation]:
    """The `waiting` index (what GET /queues counts as waiting) lists only runs parked on a
    durable wait: an ended, running or vanished run left in it is a count that lies."""
    found = []
    for run_id in snapshot.waiting:
        run = snapshot.runs.get(run_id)
        status = "gone" if run is None else run.status
        if status != RunStatus.WAITING.value:
            found.append(Violation("waiting_index_stale", run_id, f"listed waiting, is {status}"))
    return found


def check_parked_hold_nothing(snapshot: Snapshot) -> list[Violation]:
    """A parked run (a durable wait, or waiting for a person) holds no lease."""
    return [
        Violation("parked_holds_lease", run.id, f"status {run.status}, lease in the leases zset")
        for run in snapshot.runs.values()
        if run.status in UNOWNED and run.id in snapshot.leases
    ]


def check_stream(run: StoredRun) -> list[Violation]:
    """Terminal events, fence order and whose output was kept, for one run."""
    return [*_check_ending(run), *_check_fences(run), *_check_output(run)]


def _check_ending(run: StoredRun) -> list[Violation]:
    terminal = [i for i, event in enumerate(run.events) if event.type in TERMINAL_EVENT_TYPES]
    last = run.events[-1].type if run.events else None
    if run.status in PARKED:
        if terminal or last != run.status:
            detail = f"parked as {run.status}, stream ends with {last}, {len(terminal)} terminal"
            return [Violation("terminal_mismatch", run.id, detail)]
        return []
    if run.status not in TERMINAL:
        return []  # reported by check_settled
    if len(terminal) != 1:
        kinds = [run.events[i].type for i in terminal]
        return [Violation("terminal_events", run.id, f"{len(terminal)} terminal events: {kinds}")]
    if terminal[0] != len(run.events) - 1:
        after = [event.type for event in run.events[terminal[0] + 1 :]]
        return [Violation("terminal_not_last", run.id, f"events after the terminal one: {after}")]
    if last != run.status:
        return [Violation("terminal_mismatch", run.id, f"status {run.status}, event {last}")]
    return []


def _check_fences(run: StoredRun) -> list[Violation]:
    highest = 0
    for event in run.events:
        if event.fence < highest:
            detail = f"{event.type} {event.id} at fence {event.fence} after fence {highest}"
            return [Violation("fence_backwards", run.id, detail)]
        highest = event.fence
    return []


def _check_output(run: StoredRun) -> list[Violation]:
    """A succeeded chaos run's output names the owner and fence of its last claim."""
    if run.status != RunStatus.SUCCEEDED.value or not run.fields.get("output"):
        return []
    output = json.loads(run.fields["output"])
    claims = [event for event in run.events if event.type == "claimed"]
    if not isinstance(output, dict) or "fence" not in output or not claims:
        return []
    last = claims[-1]
    if output["fence"] != last.fence or output.get("owner") != last.data.get("owner_id"):
        detail = (
            f"output from {output.get('owner')} at fence {output['fence']}, "
            f"last claim {last.data.get('owner_id')} at fence {last.fence}"
        )
        return [Violation("stale_output", run.id, detail)]
    return []


def takeover_evidence(event: Event) -> dict[str, Any] | None:
    """The evidence a reconciler recorded when it took a run from an expired owner, if any.

    ``owner_id`` and ``fence`` name the owner it took the run from; the last renewal,
    expiry and detection times are on the Redis clock (ms).
    """
    data = event.data
    evidence: Any = None
    if event.type == "lease_expired":
        evidence = data
    elif event.type in ("orphaned", "reconciliation_required"):
        evidence = (data.get("error") or {}).get("details")
    elif event.type == "cancelled" and data.get("reason") == "owner_lost":
        evidence = data.get("evidence")
    needed = ("owner_id", "fence", "last_renewed_at_ms", "lease_expires_at_ms", "detected_at_ms")
    if not isinstance(evidence, dict) or any(evidence.get(name) is None for name in needed):
        return None  # not a reconciler's detection (e.g. parked by the executor itself)
    return evidence


def check_stale_writes(run: StoredRun, stale_owners: set[str]) -> list[Violation]:
    """Once a stale owner's lease was taken over, no later event carries its fence."""
    for i, event in enumerate(run.events):
        evidence = takeover_evidence(event)
        if evidence is None or evidence["owner_id"] not in stale_owners:
            continue
        stale = [later for later in run.events[i + 1 :] if later.fence == evidence["fence"]]
        if stale:
            detail = (
                f"{len(stale)} event(s) of {evidence['owner_id']} at fence {evidence['fence']} "
                f"after the takeover: {[later.type for later in stale][:5]}"
            )
            return [Violation("stale_write_accepted", run.id, detail)]
    return []


def check_effects(run_ids: Iterable[str], side_dir: Path) -> tuple[list[Violation], Counter[str]]:
    """Non-idempotent effects ran at most once per key; returns violations and counts.

    ``run_ids``: every run created, the deleted ones too (the side channel outlives them).
    """
    found = []
    counts: Counter[str] = Counter()
    # by key across runs: a re-run (POST /runs/{id}/retry) keeps its first run's keys
    rows: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for run_id in run_ids:
        executions = read_executions(side_dir, run_id)
        non_idempotent = [row for row in executions if row["idempotent"] == "0"]
        counts["non_idempotent"] += len(non_idempotent)
        counts["idempotent"] += len(executions) - len(non_idempotent)
        for row in non_idempotent:
            rows.setdefault(row["key"], []).append((run_id, row))
    for key, ran in rows.items():
        if len(ran) > 1:
            owners = [f"{r['owner']}@{r['fence']}" for _, r in ran]
            found.append(
                Violation("effect_repeated", ran[0][0], f"{key} ran {len(ran)}x: {owners}")
            )
    return found, counts


def check_follow(follow: Follow, run: StoredRun | None) -> list[Violation]:
    """A follower got each stored event exactly once, in order, whatever its reconnections."""
    if follow.error is not None:
        return [Violation("follow_failed", follow.run_id, f"{follow.mode}: {follow.error}")]
    if run is None or follow.gone:
        return []  # reported by check_runs_known, or judged by promises.check_gone
    got = [event_id for event_id, _, _ in follow.received]
    stored = [event.id for event in run.events]
    if len(got) != len(set(got)):
        dupes = [event_id for event_id, n in Counter(got).items() if n > 1]
        return [Violation("follow_duplicate", run.id, f"{follow.mode} got twice: {dupes[:5]}")]
    if got != stored[: len(got)]:
        return [Violation("follow_gap", run.id, _first_difference(follow.mode, got, stored))]
    if run.status in TERMINAL and follow.done and len(got) != len(stored):
        detail = f"{follow.mode} ended after {len(got)} of {len(stored)} events"
        return [Violation("follow_incomplete", run.id, detail)]
    if run.status in TERMINAL and not follow.done:
        detail = f"{follow.mode} never saw the end ({len(got)} of {len(stored)} events)"
        return [Violation("follow_incomplete", run.id, detail)]
    return []


def _first_difference(mode: str, got: list[str], stored: list[str]) -> str:
    for i, (mine, theirs) in enumerate(zip(got, stored, strict=False)):
        if mine != theirs:
            return f"{mode}: event {i} is {mine}, the stream has {theirs}"
    return f"{mode}: got {len(got)} events, the stream has {len(stored)}"


def check_stable(before: Snapshot, after: Snapshot) -> list[Violation]:
    """Terminal runs read later are unchanged: status, finish time, last event, length."""
    found = []
    for run_id, run in before.runs.items():
        if run.status not in TERMINAL:
            continue
        later = after.runs.get(run_id)
        if later is None or later.signature() != run.signature():
            now = later.signature() if later else "gone"
            found.append(Violation("terminal_changed", run_id, f"{run.signature()} -> {now}"))
    return found
