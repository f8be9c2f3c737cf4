"""Issue 12/13's chaos invariants on hand-made histories: each broken promise is named."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import pytest

from tools.chaos.checker import Event, Snapshot, StoredRun, check_effects
from tools.chaos.handlers import effects_file, returns_file
from tools.chaos.janitor import Janitor, Unanswered
from tools.chaos.promises import (
    Gone,
    account_for_missing,
    check_answers,
    check_cancels,
    check_deleted,
    check_gone,
    check_reruns,
    check_returned,
    check_returns,
)
from tools.chaos.tap import ActivityTap, Entry
from tools.chaos.workload import Answers, Follow, RunPlan, Tracked

pytestmark = pytest.mark.chaos

RUN = "default.01M8NMVX0F2FBPYNB2A04QJM1Z"
OTHER = "default.01M8NMVX0F2FBPYNB2A04QJM2A"


def kinds(found: list[Any]) -> list[str]:
    return [violation.kind for violation in found]


def tap(**by_run: list[tuple[int, str, int]]) -> ActivityTap:
    activity = ActivityTap(cast(Any, None), "p", "default")
    for name, entries in by_run.items():
        run_id = RUN if name == "run" else OTHER
        activity.by_run[run_id] = [Entry(ms, kind, kind, fence) for ms, kind, fence in entries]
    return activity


def janitor(runs: list[Tracked] | None = None) -> Janitor:
    return Janitor(cast(Any, None), random.Random(0), runs or [])


def tracked(run_id: str, *, cancel_acked: bool = False) -> Tracked:
    plan = RunPlan(kind="short", handler="chaos.tick", input={})
    return Tracked(plan, key=run_id, run_id=run_id, cancel_acked=cancel_acked)


def stored(status: str, *events: tuple[str, int], output: Any = None) -> StoredRun:
    fields = {"status": status}
    if output is not None:
        fields["output"] = json.dumps(output)
    history = [Event(f"{i + 1}-0", kind, fence, {}) for i, (kind, fence) in enumerate(events)]
    return StoredRun(RUN, fields, history)


ENDED = [(100, "created", 0), (110, "claimed", 1), (150, "succeeded", 1)]


def test_a_run_deleted_after_its_end_passes() -> None:
    assert check_deleted({RUN: 200}, tap(run=ENDED), []) == []


def test_a_run_deleted_before_it_ended_is_caught() -> None:
    running = [(100, "created", 0), (110, "claimed", 1)]
    assert kinds(check_deleted({RUN: 200}, tap(run=running), [])) == ["deleted_not_terminal"]
    # its end came only after the delete answered: it was not finished when deleted
    assert kinds(check_deleted({RUN: 120}, tap(run=ENDED), [])) == ["deleted_not_terminal"]


def test_a_write_after_a_deleted_runs_end_is_caught() -> None:
    written = [*ENDED, (300, "claimed", 2)]
    assert kinds(check_deleted({RUN: 200}, tap(run=written), [])) == ["deleted_written_after"]


def test_a_deleted_run_whose_keys_came_back_is_caught() -> None:
    assert kinds(check_deleted({RUN: 200}, tap(run=ENDED), [RUN])) == ["deleted_resurrected"]


def test_a_tap_with_a_gap_does_not_blame_a_run_for_what_it_missed() -> None:
    gappy = tap()
    gappy.gaps = 1
    assert check_deleted({RUN: 200}, gappy, []) == []


def test_the_output_a_handler_returned_is_the_runs_output() -> None:
    returned = [{"owner": "w1", "fence": 1, "output": {"owner": "w1", "fence": 1}}]
    kept = stored(
        "succeeded", ("created", 0), ("claimed", 1), ("succeeded", 1), output=returned[0]["output"]
    )
    assert check_returned(kept, returned) == []
    other = stored("succeeded", ("claimed", 1), ("succeeded", 1), output={"owner": "w9"})
    assert kinds(check_returned(other, returned)) == ["output_not_returned"]


def test_an_output_lost_without_a_takeover_is_caught() -> None:
    returned = [{"owner": "w1", "fence": 1, "output": {"fence": 1}}]
    lost = stored("failed", ("created", 0), ("claimed", 1), ("failed", 1))
    assert kinds(check_returned(lost, returned)) == ["output_lost"]
    # the lease was lost before the terminal write landed: orphaned at fence 2 is fine
    taken = stored("orphaned", ("created", 0), ("claimed", 1), ("orphaned", 2))
    assert check_returned(taken, returned) == []


def test_an_acknowledged_cancel_ends_cancelled_or_succeeded() -> None:
    runs = [tracked(RUN, cancel_acked=True)]
    for status, expected in [("cancelled", []), ("succeeded", []), ("failed", ["cancel_lost"])]:
        snapshot = Snapshot({RUN: stored(status, ("created", 0), (status, 1))}, 0)
        assert kinds(check_cancels(runs, snapshot, tap())) == expected
    # deleted since: the tap's terminal entry says how it ended
    orphaned = tap(run=[(100, "created", 0), (150, "orphaned", 2)])
    assert kinds(check_cancels(runs, Snapshot({}, 0), orphaned)) == ["cancel_lost"]


def test_a_500_and_a_503_without_retry_after_are_caught() -> None:
    answers = Answers()
    answers.note("POST", "/runs", 503, "1")
    assert check_answers(answers, janitor()) == []
    answers.note("GET", "/runs", 500, None)
    answers.note("POST", "/runs/purge", 503, None)
    assert kinds(check_answers(answers, janitor())) == ["api_5xx", "no_retry_after"]
    assert answers.creates_refused == 1


def test_a_run_gone_without_a_delete_is_caught_and_a_deleted_one_is_not() -> None:
    runs = [tracked(RUN), tracked(OTHER)]
    cleaner = janitor(runs)
    cleaner.deleted[RUN] = 200
    gone = account_for_missing(Snapshot({}, 0), runs, cleaner, tap())
    assert (gone.deleted, gone.vanished) == ({RUN}, {OTHER})
    follows = [Follow(RUN, "raw", gone=True), Follow(OTHER, "client", gone=True)]
    assert kinds(check_gone(gone, follows)) == ["run_vanished", "follow_gone"]


def test_a_run_an_unanswered_purge_may_have_taken_is_accounted_for() -> None:
    runs = [tracked(OTHER)]
    cleaner = janitor(runs)
    cleaner.unanswered.append(Unanswered(500, 600, None, finished_before_ms=400))
    ended = tap(other=[(100, "created", 0), (300, "succeeded", 1)])
    assert account_for_missing(Snapshot({}, 0), runs, cleaner, ended).maybe_deleted == {OTHER}
    # it ended after the purge's finished_before: that purge could not have taken it
    late = tap(other=[(100, "created", 0), (450, "succeeded", 1)])
    assert account_for_missing(Snapshot({}, 0), runs, cleaner, late).vanished == {OTHER}


def test_returns_made_under_memory_pressure_are_counted(tmp_path: Path) -> None:
    rows = [
        {"owner": "w1", "fence": 1, "at": 1.0, "output": {"fence": 1}},
        {"owner": "w2", "fence": 2, "at": 5.0, "output": {"fence": 2}},
    ]
    returns_file(tmp_path, RUN).write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = stored(
        "succeeded", ("claimed", 1), ("requeued", 2), ("succeeded", 2), output={"fence": 2}
    )
    found, counts = check_returns(Snapshot({RUN: run}, 0), tmp_path, [(4000, 6000)])
    assert (found, dict(counts)) == ([], {"compared": 2, "under_memory_pressure": 1})


def linked(run_id: str, **links: str) -> StoredRun:
    return StoredRun(run_id, {"status": "failed", **links}, [])


THIRD = "default.01M8NMVX0F2FBPYNB2A04QJM3B"


def test_runs_that_name_each_other_and_one_answer_per_key_pass() -> None:
    snapshot = Snapshot({RUN: linked(RUN, retried_by=OTHER), OTHER: linked(OTHER, retry_of=RUN)}, 0)
    assert check_reruns(snapshot, {RUN: {OTHER}}, Gone()) == []
    # the old run purged, or the re-run deleted: a link to nothing is no broken link
    assert check_reruns(Snapshot({OTHER: linked(OTHER, retry_of=RUN)}, 0), {}, Gone()) == []


def test_a_fork_and_a_one_way_link_are_caught() -> None:
    snapshot = Snapshot(
        {
            RUN: linked(RUN, retried_by=THIRD),
            OTHER: linked(OTHER, retry_of=RUN),
            THIRD: linked(THIRD, retry_of=RUN),
        },
        0,
    )
    assert kinds(check_reruns(snapshot, {RUN: {OTHER, THIRD}}, Gone())) == [
        "rerun_forked",
        "rerun_link_broken",
    ]
    # the first re-run was deleted meanwhile: the old run could be re-run again
    assert kinds(check_reruns(snapshot, {RUN: {OTHER, THIRD}}, Gone(deleted={OTHER}))) == [
        "rerun_link_broken"
    ]


def test_an_effect_key_run_again_by_a_re_run_is_a_repeat(tmp_path: Path) -> None:
    key = f"{RUN}:charge:1"
    effects_file(tmp_path, RUN).write_text(f"{key} w-1 1 0\n")
    effects_file(tmp_path, OTHER).write_text(f"{key} w-2 1 0\n")
    found, counts = check_effects([RUN, OTHER], tmp_path)
    assert kinds(found) == ["effect_repeated"] and counts["non_idempotent"] == 2
    assert check_effects([RUN], tmp_path)[0] == []


def test_grants_past_limit_plus_burst_in_one_period_are_rate_exceeded(tmp_path: Path) -> None:
    from tools.chaos.promises import check_rate_limit
    from tools.chaos.rates import QUOTA_SPEC, grants_file, read_grants

    steady = [1000 + 200 * i for i in range(20)]  # 5 a second: the limit
    burst = [50_000, 50_000, *(50_000 + 200 * i for i in range(1, 6))]  # 2 + 5 in 1 s
    grants_file(tmp_path, RUN).write_text("".join(f"{t}\n" for t in steady + burst) + "12")
    assert check_rate_limit(read_grants(tmp_path)) == []  # a cut-off last line is skipped
    grants_file(tmp_path, OTHER).write_text("50998\n50999\n")  # 8 in [50000, 50999]
    (found,) = check_rate_limit(read_grants(tmp_path))
    assert found.kind == "rate_exceeded"
    assert f"= {QUOTA_SPEC.limit + QUOTA_SPEC.burst}" in found.detail
