"""The hand-off's promise under faults: a run handed to a dead worker is given back.

A create claims a run for a worker registered idle and pushes the claim's row to
that worker's inbox (``scripts/lua/includes/claim.lua``). The ``kill_idle_worker``
fault kills a registered worker and then creates runs while its registration
lives, and lists the rows it finds in the dead worker's inbox: runs leased to an
owner that never read them. For each of those the checker asks:

* ``handoff_not_released``: the lease's end was ``released`` with reason
  ``handoff_undelivered`` (or ``cancelled`` by that release, when a cancel was
  pending) — not ``orphaned``, ``lease_expired`` or parked for a person, which
  would blame a worker that never saw the run (and, for an orphan, lose it);
* ``handoff_started``: the dead owner never ran it (the handlers' side channel
  has no step of that owner at that fence): a release after a start would run
  the handler twice;
* ``handoff_not_rerun``: after the release a living worker claimed it (unless
  it ended without running: cancelled, expired in the queue, or deleted);
* ``handoff_row_left``: nothing is left in the dead worker's inbox at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from tools.chaos.checker import Event, Snapshot, StoredRun, Violation
from tools.chaos.faults import Fault, FaultKind
from tools.chaos.handlers import read_executions, read_ticks

RELEASE_REASON = "handoff_undelivered"
# how a run may end after its release without any worker claiming it
ENDED_UNCLAIMED = {"cancelled", "expired"}


@dataclass(frozen=True)
class Handed:
    """One run a create handed to a worker that was dead by then: its lease's fence."""

    owner_id: str
    run_id: str
    fence: int


def handed_runs(faults: Iterable[Fault]) -> list[Handed]:
    """The undelivered hand-offs every ``kill_idle_worker`` fault found."""
    found = []
    for fault in faults:
        if fault.kind != FaultKind.KILL_IDLE_WORKER or not fault.owner_id:
            continue
        for row in fault.details.get("handed", []):
            run_id, fence = str(row).rsplit("@", 1)
            found.append(Handed(fault.owner_id, run_id, int(fence)))
    return found


def check_handoff(
    handed: Handed, run: StoredRun | None, ran_at: set[tuple[str, int]]
) -> list[Violation]:
    """One undelivered hand-off: released, never started by its owner, then run elsewhere.

    ``run`` is None when the run is gone (a purge took it: judged by the deletion
    checks); ``ran_at`` holds the (owner, fence) of every handler step and effect
    the side channel recorded for the run.
    """
    if run is None:
        return []
    found = []
    if (handed.owner_id, handed.fence) in ran_at:
        detail = f"its handler ran as {handed.owner_id}@{handed.fence}, a dead worker's row"
        found.append(Violation("handoff_started", run.id, detail))
    claimed = next(
        (i for i, e in enumerate(run.events) if e.type == "claimed" and e.fence == handed.fence),
        None,
    )
    if claimed is None:
        detail = f"no claim at fence {handed.fence} for {handed.owner_id} in its stream"
        return [*found, Violation("handoff_not_released", run.id, detail)]
    later = run.events[claimed + 1 :]
    end = next((i for i, e in enumerate(later) if e.fence > handed.fence), None)
    if end is None or not _given_back(later[end], handed.owner_id):
        what = "nothing" if end is None else f"{later[end].type} {later[end].data}"
        detail = f"the hand-off to {handed.owner_id}@{handed.fence} ended by {what}"
        return [*found, Violation("handoff_not_released", run.id, detail)]
    rest = later[end + 1 :]
    rerun = any(e.type == "claimed" and e.data.get("owner_id") != handed.owner_id for e in rest)
    if later[end].type == "released" and not rerun and run.status not in ENDED_UNCLAIMED:
        detail = f"released, then no living worker claimed it (status {run.status})"
        found.append(Violation("handoff_not_rerun", run.id, detail))
    return found


def _given_back(event: Event, owner_id: str) -> bool:
    """The release of an unread hand-off: released for it, or cancelled by it."""
    if event.type == "released":
        return event.data.get("reason") == RELEASE_REASON
    return event.type == "cancelled" and event.data.get("released_by") == owner_id


def check_handoffs(snapshot: Snapshot, faults: Iterable[Fault], side_dir: Path) -> list[Violation]:
    """Every undelivered hand-off the faults found, checked against the settled state."""
    found = []
    for handed in handed_runs(faults):
        ran_at = {(owner, fence) for owner, fence, _ in read_ticks(side_dir, handed.run_id)}
        ran_at |= {
            (row["owner"], int(row["fence"])) for row in read_executions(side_dir, handed.run_id)
        }
        found += check_handoff(handed, snapshot.runs.get(handed.run_id), ran_at)
    return found


def handoff_figures(faults: Iterable[Fault]) -> dict[str, int]:
    """How often the hand-off fault found a registered worker, and the rows it stranded."""
    hits = [f for f in faults if f.kind == FaultKind.KILL_IDLE_WORKER]
    return {
        "faults": len(hits),
        "registered": sum(1 for f in hits if f.details.get("registered")),
        "handed": sum(len(f.details.get("handed", [])) for f in hits),
    }


async def check_inboxes(
    client: aioredis.Redis, prefix: str, queue: str, faults: Iterable[Fault]
) -> list[Violation]:
    """No row is left in the inbox of a worker the hand-off fault killed."""
    keys = QueueKeys(prefix, queue)
    found = []
    owners = {f.owner_id for f in faults if f.kind == FaultKind.KILL_IDLE_WORKER and f.owner_id}
    for owner in sorted(owners):
        left = await client.llen(keys.handoff_inbox(owner))
        if left:
            detail = f"{left} row(s) left in the inbox of {owner}, killed"
            found.append(Violation("handoff_row_left", owner, detail))
    return found
