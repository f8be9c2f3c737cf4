"""The invariants of issues 12 and 13, checked like the others after the chaos settles.

* ``api_5xx`` / ``no_retry_after``: no API ever answered a 5xx other than 503, and
  every 503 said ``Retry-After`` (Redis away, out of memory, a full resource);
* ``output_lost`` / ``output_not_returned``: what a handler returned (noted in the
  side channel before it returned) is the run's output, unless the run was taken
  from that owner afterwards (an event at a higher fence: orphaned, requeued,
  released, parked) — and a succeeded run's output is one a handler returned;
* ``cancel_lost``: a run whose cancel was answered 202 ends ``cancelled`` or
  ``succeeded`` (never failed, orphaned, queued or parked);
* ``deleted_not_terminal`` / ``deleted_written_after`` / ``deleted_resurrected``:
  every run a purge or DELETE removed had ended before the answer (the activity
  tap saw its terminal entry), nothing was written for it after its end, and none
  of its keys exists again at the end;
* ``run_vanished`` (in place of ``run_missing``): a created run is gone from Redis
  although no answered purge or DELETE took it and no unanswered one may have;
* ``follow_gone``: a follower was answered 404 for a run nobody deleted;
* ``janitor_refused``: a well-formed purge or DELETE was answered 4xx (not 409/404);
* ``rerun_forked`` / ``rerun_link_broken`` (issue 16): a re-run sent twice with one
  idempotency key named one new run (unless the first was deleted meanwhile), and
  ``retry_of`` / ``retried_by`` of the stored runs name each other
  (:mod:`tools.chaos.rerunner`);
* ``rate_exceeded``: a rate-limit key's grants (``chaos.quota``, written down outside
  Redis) passed limit + burst in some window of one period (:mod:`tools.chaos.rates`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.models import RunStatus
from app.models.read import RateLimitSpec
from tools.chaos import rates
from tools.chaos.checker import TERMINAL, Snapshot, StoredRun, Violation
from tools.chaos.handlers import read_returns
from tools.chaos.janitor import Janitor
from tools.chaos.tap import ActivityTap, Entry
from tools.chaos.workload import Answers, Follow, Tracked

CANCEL_ENDS = {RunStatus.CANCELLED.value, RunStatus.SUCCEEDED.value}


@dataclass
class Gone:
    """Created runs no longer in Redis at the end, by why that is fine (or not)."""

    deleted: set[str] = field(default_factory=set)  # an answered purge or DELETE took it
    maybe_deleted: set[str] = field(default_factory=set)  # an unanswered one may have
    vanished: set[str] = field(default_factory=set)  # nothing explains it


def account_for_missing(
    snapshot: Snapshot, tracked: list[Tracked], janitor: Janitor, tap: ActivityTap
) -> Gone:
    """Sort the created runs missing from Redis by what the janitor's answers say."""
    gone = Gone()
    for t in tracked:
        if t.run_id is None or t.run_id in snapshot.runs:
            continue
        if t.run_id in janitor.deleted:
            gone.deleted.add(t.run_id)
        elif _maybe_deleted(t.run_id, janitor, tap):
            gone.maybe_deleted.add(t.run_id)
        else:
            gone.vanished.add(t.run_id)
    return gone


def may_be_deleted(run_id: str, janitor: Janitor, tap: ActivityTap) -> bool:
    """Whether an answered purge or DELETE took ``run_id``, or an unanswered one may have.

    For runs no client created (a parent's children), whose absence the family checks
    must tell from a lost end.
    """
    return run_id in janitor.deleted or _maybe_deleted(run_id, janitor, tap)


def _maybe_deleted(run_id: str, janitor: Janitor, tap: ActivityTap) -> bool:
    end = _terminal(tap.by_run.get(run_id, []))
    for window in janitor.unanswered:
        if window.run_id == run_id:
            return True
        if window.run_id is None and end is not None:
            matches = window.status is None or window.status == end.type
            if matches and end.ms < (window.finished_before_ms or 0):
                return True
    return False


def check_gone(gone: Gone, follows: list[Follow]) -> list[Violation]:
    """Nothing vanished unexplained; a follower's 404 is for a run that was deleted."""
    found = [
        Violation(
            "run_vanished", run_id, "created, gone from Redis, and no purge or DELETE took it"
        )
        for run_id in sorted(gone.vanished)
    ]
    for follow in follows:
        if follow.gone and follow.run_id not in gone.deleted | gone.maybe_deleted:
            detail = f"{follow.mode} follower answered 404 for a run nobody deleted"
            found.append(Violation("follow_gone", follow.run_id, detail))
    return found


def check_deleted(
    deleted: dict[str, int], tap: ActivityTap, resurrected: Iterable[str]
) -> list[Violation]:
    """Every deleted run had ended before the answer, and nothing was written for it after."""
    found = [
        Violation("deleted_resurrected", run_id, "a key of the deleted run exists at the end")
        for run_id in sorted(resurrected)
    ]
    for run_id, answered_ms in sorted(deleted.items()):
        entries = tap.by_run.get(run_id, [])
        end = _terminal(entries)
        if end is None or end.ms > answered_ms:
            if tap.gaps == 0:
                last = entries[-1] if entries else None
                detail = f"deleted at {answered_ms}; last activity seen: {last}"
                found.append(Violation("deleted_not_terminal", run_id, detail))
            continue
        after = entries[entries.index(end) + 1 :]
        if after:
            detail = f"ended {end.type} at {end.ms}, then {[(e.type, e.ms) for e in after][:5]}"
            found.append(Violation("deleted_written_after", run_id, detail))
    return found


def _terminal(entries: list[Entry]) -> Entry | None:
    return next((entry for entry in entries if entry.type in TERMINAL), None)


def check_returned(run: StoredRun, returns: list[dict[str, Any]]) -> list[Violation]:
    """The last output a handler returned was kept, unless its owner lost the run after."""
    if not returns:
        return []
    last = max(returns, key=lambda row: int(row["fence"]))
    if run.status == RunStatus.SUCCEEDED.value:
        output = json.loads(run.fields.get("output") or "null")
        if all(output != row["output"] for row in returns):
            detail = f"output {output} is none of the {len(returns)} returned"
            return [Violation("output_not_returned", run.id, detail)]
        return []
    if any(event.fence > int(last["fence"]) for event in run.events):
        return []  # taken from that owner (or parked, resumed) after it returned
    detail = (
        f"{last['owner']} returned at fence {last['fence']}, the run ended {run.status} "
        f"with no takeover after: {[e.type for e in run.events[-4:]]}"
    )
    return [Violation("output_lost", run.id, detail)]


def check_returns(
    snapshot: Snapshot, side_dir: Path, windows_ms: list[tuple[int, int]]
) -> tuple[list[Violation], Counter[str]]:
    """:func:`check_returned` for every stored run.

    Also counts the returns compared, and those made inside ``windows_ms`` (the
    memory-pressure faults, and a lease after each: the terminal write that had
    to wait for Redis to accept writes again).
    """
    found: list[Violation] = []
    counts: Counter[str] = Counter()
    for run in snapshot.runs.values():
        if run.status not in TERMINAL:
            continue  # parked: reported elsewhere if it should not be
        returns = read_returns(side_dir, run.id)
        counts["compared"] += len(returns)
        counts["under_memory_pressure"] += sum(
            1
            for row in returns
            if any(start <= row.get("at", 0) * 1000 <= end for start, end in windows_ms)
        )
        found += check_returned(run, returns)
    return found, counts


def check_cancels(tracked: list[Tracked], snapshot: Snapshot, tap: ActivityTap) -> list[Violation]:
    """A run whose cancel was answered 202 ended cancelled, or succeeded if it got there first."""
    found = []
    for t in tracked:
        if not t.cancel_acked or t.run_id is None:
            continue
        run = snapshot.runs.get(t.run_id)
        if run is not None:
            status = run.status
        else:  # deleted since: its end as the tap saw it
            end = _terminal(tap.by_run.get(t.run_id, []))
            status = end.type if end else "unknown"
        if status not in CANCEL_ENDS and status != "unknown":
            found.append(Violation("cancel_lost", t.run_id, f"cancel answered 202, ended {status}"))
    return found


def check_answers(answers: Answers, janitor: Janitor) -> list[Violation]:
    """No 5xx but 503, every 503 with Retry-After; no well-formed cleanup call refused."""
    found = []
    for call, status, retry_after in answers.server_errors:
        if status != 503:
            found.append(Violation("api_5xx", call, f"answered {status}"))
        elif retry_after is None:
            found.append(Violation("no_retry_after", call, "503 without Retry-After"))
    found += [Violation("janitor_refused", "-", error) for error in janitor.errors]
    return found


def check_reruns(snapshot: Snapshot, answered: dict[str, set[str]], gone: Gone) -> list[Violation]:
    """One new run per re-run request (and key); the links of stored runs agree.

    ``answered``: each re-run old run id -> every new run id its answers named. A
    re-run deleted (or maybe deleted) meanwhile frees the old run to be re-run again,
    so only the ids still accounted for as stored count toward a fork.
    """
    found = []
    removed = gone.deleted | gone.maybe_deleted
    for old_id, named in sorted(answered.items()):
        kept = sorted(named - removed)
        if len(kept) > 1:
            found.append(Violation("rerun_forked", old_id, f"one key, new runs {kept}"))
    for run in snapshot.runs.values():
        retry_of = run.fields.get("retry_of") or ""
        old = snapshot.runs.get(retry_of) if retry_of else None
        if old is not None and old.fields.get("retried_by") != run.id:
            detail = f"re-runs {retry_of}, whose retried_by is {old.fields.get('retried_by')!r}"
            found.append(Violation("rerun_link_broken", run.id, detail))
        by = run.fields.get("retried_by") or ""
        new = snapshot.runs.get(by) if by else None
        if new is not None and new.fields.get("retry_of") != run.id:
            detail = f"retried_by {by}, whose retry_of is {new.fields.get('retry_of')!r}"
            found.append(Violation("rerun_link_broken", run.id, detail))
    return found


def check_rate_limit(
    grants_ms: list[int], spec: RateLimitSpec = rates.QUOTA_SPEC, key: str = rates.QUOTA_KEY
) -> list[Violation]:
    """``rate_exceeded`` when one period's window holds more than limit + burst grants."""
    # a closed window one ms short of the period: grants exactly one period apart are
    # the steady rate, not an excess
    most, at = rates.worst_window(grants_ms, spec.period_ms - 1)
    if most <= spec.limit + spec.burst:
        return []
    detail = (
        f"{most} grants of {key} in the {spec.period_ms} ms from {at}; "
        f"limit {spec.limit} + burst {spec.burst} = {spec.limit + spec.burst}"
    )
    return [Violation("rate_exceeded", "", detail)]
