"""The invariant checker on hand-made histories: each broken invariant is named."""

from __future__ import annotations

from typing import Any

import pytest

from tools.chaos.checker import (
    Event,
    Snapshot,
    StoredRun,
    check_follow,
    check_no_drift,
    check_parked_hold_nothing,
    check_pinned_builds,
    check_settled,
    check_stable,
    check_stale_writes,
    check_stream,
    check_waiting_index,
    runs_across_builds,
)
from tools.chaos.workload import Follow

pytestmark = pytest.mark.chaos

RUN = "default.01M8NMVX0F2FBPYNB2A04QJM1Z"


def run(status: str, *events: tuple[str, int], **fields: str) -> StoredRun:
    stored = [
        Event(f"{i + 1}-0", kind, fence, {"owner_id": f"w{fence}"} if kind == "claimed" else {})
        for i, (kind, fence) in enumerate(events)
    ]
    return StoredRun(RUN, {"status": status, **fields}, stored)


def kinds(found: list[Any]) -> list[str]:
    return [violation.kind for violation in found]


def test_a_clean_retried_history_passes() -> None:
    history = run(
        "succeeded",
        ("created", 0),
        ("claimed", 1),
        ("lease_expired", 2),
        ("requeued", 2),
        ("claimed", 3),
        ("succeeded", 3),
        output='{"owner": "w3", "fence": 3}',
    )
    assert check_stream(history) == []


def test_a_write_from_a_fenced_out_owner_is_caught() -> None:
    history = run("orphaned", ("created", 0), ("claimed", 1), ("orphaned", 2), ("progress", 1))
    assert kinds(check_stream(history)) == ["terminal_not_last", "fence_backwards"]


def test_two_terminal_events_are_caught() -> None:
    history = run("succeeded", ("created", 0), ("claimed", 1), ("orphaned", 2), ("succeeded", 2))
    assert kinds(check_stream(history)) == ["terminal_events"]


def test_an_output_kept_from_an_earlier_owner_is_caught() -> None:
    history = run(
        "succeeded",
        ("created", 0),
        ("claimed", 1),
        ("released", 2),
        ("claimed", 3),
        ("succeeded", 3),
        output='{"owner": "w1", "fence": 1}',
    )
    assert kinds(check_stream(history)) == ["stale_output"]


def test_a_parked_run_must_end_with_the_event_that_parked_it() -> None:
    parked = run("waiting_human", ("created", 0), ("claimed", 1), ("waiting_human", 2))
    assert check_stream(parked) == []
    written_after = run(
        "waiting_human", ("created", 0), ("claimed", 1), ("waiting_human", 2), ("progress", 2)
    )
    assert kinds(check_stream(written_after)) == ["terminal_mismatch"]


def test_a_running_run_is_unsettled_and_its_lease_is_described() -> None:
    snapshot = Snapshot({RUN: run("running", ("created", 0), ("claimed", 1))}, now_ms=10_000)
    assert "no lease" in check_settled(snapshot)[0].detail
    snapshot.leases[RUN] = 12_000
    assert "expires in 2000 ms" in check_settled(snapshot)[0].detail


def test_a_waiting_run_that_still_holds_a_lease_is_caught() -> None:
    waiting = run("waiting", ("created", 0), ("claimed", 1), ("wait", 2))
    snapshot = Snapshot({RUN: waiting}, now_ms=10_000)
    assert check_parked_hold_nothing(snapshot) == []
    snapshot.leases[RUN] = 12_000
    assert kinds(check_parked_hold_nothing(snapshot)) == ["parked_holds_lease"]


def test_followers_must_see_each_stored_event_once_in_order() -> None:
    stored = run("succeeded", ("created", 0), ("claimed", 1), ("succeeded", 1))
    complete = Follow(RUN, "raw", [("1-0", "created", 0), ("2-0", "claimed", 1)], done=False)
    complete.received.append(("3-0", "succeeded", 1))
    complete.done = True
    assert check_follow(complete, stored) == []
    twice = Follow(RUN, "raw", [("1-0", "created", 0), ("1-0", "created", 0)])
    assert kinds(check_follow(twice, stored)) == ["follow_duplicate"]
    gap = Follow(RUN, "client", [("1-0", "created", 0), ("3-0", "succeeded", 1)], done=True)
    assert kinds(check_follow(gap, stored)) == ["follow_gap"]
    stuck = Follow(RUN, "client", [("1-0", "created", 0)])
    assert kinds(check_follow(stuck, stored)) == ["follow_incomplete"]


def test_a_terminal_run_that_changes_later_is_caught() -> None:
    before = Snapshot({RUN: run("orphaned", ("created", 0), ("claimed", 1), ("orphaned", 2))}, 0)
    after = Snapshot(
        {RUN: run("succeeded", ("created", 0), ("claimed", 1), ("orphaned", 2), ("succeeded", 1))},
        0,
    )
    assert kinds(check_stable(before, after)) == ["terminal_changed"]
    assert check_stable(before, before) == []


def test_a_stale_owners_write_after_its_takeover_is_caught() -> None:
    evidence = {
        "owner_id": "w1",
        "fence": 1,
        "last_renewed_at_ms": 1,
        "lease_expires_at_ms": 2,
        "detected_at_ms": 3,
    }
    history = run("running", ("created", 0), ("claimed", 1), ("progress", 1), ("progress", 1))
    history.events[3:3] = [Event("3-1", "lease_expired", 2, evidence)]
    assert kinds(check_stale_writes(history, {"w1"})) == ["stale_write_accepted"]
    assert check_stale_writes(history, {"w9"}) == []


def test_a_run_parked_for_version_drift_is_a_false_drift_here() -> None:
    """Every build of the soak runs the same code: no run may drift."""
    error = '{"code":"version_drift","message":"x","retryable":false}'
    drifted = run("reconciliation_required", ("claimed", 1), ("reconciliation_required", 2))
    drifted.fields["error"] = error
    unknown = run("reconciliation_required", ("claimed", 1), ("reconciliation_required", 2))
    unknown.fields["error"] = '{"code":"effect_outcome_unknown"}'
    assert kinds(check_no_drift(Snapshot({"a": drifted}, 0))) == ["false_drift"]
    assert check_no_drift(Snapshot({"b": unknown}, 0)) == []


def test_runs_claimed_under_two_builds_are_counted() -> None:
    moved = StoredRun(
        RUN,
        {"status": "succeeded"},
        [
            Event("1-0", "claimed", 1, {"owner_id": "w1", "build_id": "chaos-1"}),
            Event("2-0", "claimed", 2, {"owner_id": "w2", "build_id": "chaos-2"}),
        ],
    )
    stayed = run("succeeded", ("claimed", 1))
    assert runs_across_builds(Snapshot({"a": moved, "b": stayed}, 0)) == 1


def _claims(*steps: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event(f"{i + 1}-0", kind, i + 1, data) for i, (kind, data) in enumerate(steps)]


def test_a_pinned_run_claimed_by_another_build_is_pinned_elsewhere() -> None:
    """The first claim pins; an upgrade moves the pin; any other build's claim is a fault."""
    a, b = {"build_id": "chaos-1"}, {"build_id": "chaos-2"}
    wrong = StoredRun(
        RUN,
        {"status": "succeeded", "versioning": "pinned"},
        _claims(("claimed", a), ("claimed", b)),
    )
    upgraded = StoredRun(
        RUN,
        {"status": "succeeded", "versioning": "pinned"},
        _claims(("claimed", a), ("upgraded", {"from": "chaos-1"}), ("claimed", b), ("claimed", b)),
    )
    retargeted = StoredRun(
        RUN,
        {"status": "succeeded", "versioning": "pinned"},
        _claims(("claimed", a), ("upgraded", {"from": "chaos-1", "to": "chaos-3"}), ("claimed", b)),
    )
    moved_freely = StoredRun(RUN, {"status": "succeeded"}, _claims(("claimed", a), ("claimed", b)))
    assert kinds(check_pinned_builds(Snapshot({"w": wrong}, 0))) == ["pinned_elsewhere"]
    assert check_pinned_builds(Snapshot({"u": upgraded, "m": moved_freely}, 0)) == []
    assert kinds(check_pinned_builds(Snapshot({"r": retargeted}, 0))) == ["pinned_elsewhere"]


def test_a_run_left_in_the_waiting_index_after_it_ended_is_a_stale_count() -> None:
    parked = run("waiting", ("claimed", 1))
    ended = run("succeeded", ("claimed", 1), ("succeeded", 1))
    index = {"parked": 10_000.0, "ended": float("inf"), "vanished": 5.0}
    snapshot = Snapshot({"parked": parked, "ended": ended}, 0, waiting=index)
    found = check_waiting_index(snapshot)
    assert sorted((v.run_id, v.kind) for v in found) == [
        ("ended", "waiting_index_stale"),
        ("vanished", "waiting_index_stale"),
    ]
