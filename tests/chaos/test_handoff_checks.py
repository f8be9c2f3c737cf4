"""The hand-off invariants on hand-made histories: a run handed to a dead worker must be
given back (``released``, reason ``handoff_undelivered``) and run by a living one."""

from __future__ import annotations

from typing import Any

import pytest

from tools.chaos.checker import Event, StoredRun, check_stream
from tools.chaos.faults import Fault, FaultKind
from tools.chaos.handoffs import Handed, check_handoff, handed_runs, handoff_figures

pytestmark = pytest.mark.chaos

RUN = "default.01M8NMVX0F2FBPYNB2A04QJM1Z"
DEAD = "w-dead"
HANDED = Handed(DEAD, RUN, 1)
RELEASED = {"owner_id": DEAD, "reason": "handoff_undelivered"}


def run(status: str, *events: tuple[str, int, dict[str, Any]]) -> StoredRun:
    stored = [
        Event(f"{i + 1}-0", kind, fence, data) for i, (kind, fence, data) in enumerate(events)
    ]
    return StoredRun(RUN, {"status": status}, stored)


def kinds(found: list[Any]) -> list[str]:
    return [violation.kind for violation in found]


def rerun_elsewhere() -> StoredRun:
    """The history the promise asks for: released by the reconciler, run by a living worker."""
    return run(
        "succeeded",
        ("created", 0, {}),
        ("claimed", 1, {"owner_id": DEAD}),
        ("released", 2, RELEASED),
        ("claimed", 3, {"owner_id": "w-alive"}),
        ("succeeded", 3, {}),
    )


def test_a_hand_off_released_and_run_by_a_living_worker_passes() -> None:
    assert check_handoff(HANDED, rerun_elsewhere(), ran_at={("w-alive", 3)}) == []


def test_a_hand_off_orphaned_instead_of_released_is_caught_only_by_the_hand_off_check() -> None:
    # a well-formed history for every other invariant: one terminal event, last, fences rising
    history = run(
        "orphaned",
        ("created", 0, {}),
        ("claimed", 1, {"owner_id": DEAD}),
        ("orphaned", 2, {"error": {"code": "lease_expired"}}),
    )
    assert check_stream(history) == []
    assert kinds(check_handoff(HANDED, history, ran_at=set())) == ["handoff_not_released"]


def test_a_hand_off_requeued_as_an_expired_lease_is_caught() -> None:
    history = run(
        "succeeded",
        ("created", 0, {}),
        ("claimed", 1, {"owner_id": DEAD}),
        ("lease_expired", 2, {"owner_id": DEAD}),
        ("requeued", 2, {"reason": "lease_expired"}),
        ("claimed", 3, {"owner_id": "w-alive"}),
        ("succeeded", 3, {}),
    )
    assert kinds(check_handoff(HANDED, history, ran_at=set())) == ["handoff_not_released"]


def test_a_release_nobody_claims_afterwards_is_caught() -> None:
    history = run(
        "queued",
        ("created", 0, {}),
        ("claimed", 1, {"owner_id": DEAD}),
        ("released", 2, RELEASED),
    )
    assert kinds(check_handoff(HANDED, history, ran_at=set())) == ["handoff_not_rerun"]


def test_a_release_after_the_dead_owner_ran_the_handler_is_caught() -> None:
    found = check_handoff(HANDED, rerun_elsewhere(), ran_at={(DEAD, 1)})
    assert kinds(found) == ["handoff_started"]


def test_a_cancel_pending_at_the_release_ends_the_run_cancelled() -> None:
    history = run(
        "cancelled",
        ("created", 0, {}),
        ("claimed", 1, {"owner_id": DEAD}),
        ("cancel_requested", 1, {}),
        ("cancelled", 2, {"reason": "requested", "released_by": DEAD}),
    )
    assert check_handoff(HANDED, history, ran_at=set()) == []
    gone_by_purge = check_handoff(HANDED, None, ran_at=set())
    assert gone_by_purge == []


def test_the_fault_log_names_each_stranded_row_with_its_owner_and_fence() -> None:
    fault = Fault(FaultKind.KILL_IDLE_WORKER, 0, owner_id=DEAD)
    fault.details.update(registered=True, handed=[f"{RUN}@1", "default.other@4"])
    missed = Fault(FaultKind.KILL_IDLE_WORKER, 0, owner_id="w-busy", details={"registered": False})
    assert handed_runs([fault, missed, Fault(FaultKind.KILL_WORKER, 0, owner_id="x")]) == [
        HANDED,
        Handed(DEAD, "default.other", 4),
    ]
    assert handoff_figures([fault, missed]) == {"faults": 2, "registered": 1, "handed": 2}
