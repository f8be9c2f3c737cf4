"""Figures of a chaos run, computed from the final Redis state, the faults and the logs.

* **Orphan detection**: every expired lease a reconciler acted on carries its
  evidence (``last_renewed_at_ms``, ``lease_expires_at_ms``, ``detected_at_ms``, all
  on the Redis clock). The detection time is *last renewal → detection*, which
  DESIGN §6 bounds by TTL + reconcile interval (+ the interval's jitter). A lease
  that expired while Redis itself was down cannot be detected before Redis is
  back, so those samples are counted apart.
* **Takeovers**: runs claimed again after their lease expired or their owner
  released them on drain.
* **Stale writes**: the paused and partitioned workers outlive their leases; what
  Redis refused them is what they logged (``... rejected``: a write answered
  LOST; ``lease lost``: a renewal answered LOST; ``jeopardy``: a run stopped
  without writing because Redis could not confirm its lease in time).
* **Past the lease**: handler steps (side channel) an owner took after its lease
  had expired in Redis: how early jeopardy stops a handler that cannot renew.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.chaos.checker import Snapshot, StoredRun, takeover_evidence
from tools.chaos.cluster import Process
from tools.chaos.faults import REDIS_KINDS, STALE_KINDS, Fault, FaultKind
from tools.chaos.handlers import read_ticks

JITTER = 0.2  # app.reconciler.reconciler.JITTER: a scan period is interval * [0.8, 1.2]
LOG_PATTERNS = {
    "rejected_writes": re.compile(r"rejected: lease lost|run released: LOST"),
    "renewals_lost": re.compile(r"lease lost \(lease_lost\)"),
    "jeopardy_stops": re.compile(r"lease in jeopardy"),
}


@dataclass(frozen=True)
class Detection:
    """One expired lease a reconciler acted on."""

    run_id: str
    action: str
    owner_id: str
    last_renewed_ms: int
    expires_ms: int
    detected_ms: int

    @property
    def silence_ms(self) -> int:
        """Last renewal to detection: what the TTL + interval bound is about."""
        return self.detected_ms - self.last_renewed_ms


def detections(snapshot: Snapshot) -> list[Detection]:
    """Every reconciler action recorded in the streams, with its evidence."""
    found = []
    for run in snapshot.runs.values():
        for event in run.events:
            evidence = takeover_evidence(event)
            if evidence is None:
                continue
            found.append(
                Detection(
                    run.id,
                    event.type,
                    str(evidence.get("owner_id")),
                    int(evidence["last_renewed_at_ms"]),
                    int(evidence["lease_expires_at_ms"]),
                    int(evidence["detected_at_ms"]),
                )
            )
    return found


def detection_figures(
    samples: list[Detection], faults: list[Fault], *, ttl_s: float, interval_s: float
) -> dict[str, Any]:
    """p50/p99/max of last renewal → detection, against TTL + interval (+ jitter)."""
    down = [(f.started_ms, f.ended_ms) for f in faults if f.kind in REDIS_KINDS]
    clean = [s for s in samples if not _overlaps(s.expires_ms, s.detected_ms, down)]
    bound_ms = int((ttl_s + interval_s) * 1000)
    jittered_ms = int((ttl_s + interval_s * (1 + JITTER)) * 1000)
    values = sorted(s.silence_ms for s in clean)
    return {
        "count": len(samples),
        "during_redis_downtime": len(samples) - len(clean),
        "by_action": dict(Counter(s.action for s in samples)),
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "max_ms": values[-1] if values else None,
        "bound_ms": bound_ms,
        "bound_with_jitter_ms": jittered_ms,
        "over_bound": sum(1 for v in values if v > bound_ms),
        "over_bound_with_jitter": sum(1 for v in values if v > jittered_ms),
    }


def _overlaps(start: int, end: int, windows: list[tuple[int, int]]) -> bool:
    return any(start <= w_end and w_start <= end for w_start, w_end in windows)


def percentile(values: list[int], pct: float) -> int | None:
    """Nearest-rank percentile of sorted ``values`` (None when empty)."""
    if not values:
        return None
    rank = max(1, round(pct / 100 * len(values)))
    return values[min(rank, len(values)) - 1]


def unexplained(samples: list[Detection], faults: list[Fault], *, ttl_s: float) -> list[str]:
    """Expired leases no fault explains: their owner was not hit and Redis was up.

    A fault explains an expiry when the lease expired while it was under way or
    within a TTL after it (the renewals it stopped). A kill or a drain ends its
    target for good. Anything else (a healthy worker losing a lease: a starved
    heartbeat, a lost reply) is listed.
    """
    ttl_ms = int(ttl_s * 1000)
    by_owner: dict[str, list[tuple[int, int]]] = {}
    everyone: list[tuple[int, int]] = []
    for fault in faults:
        end = fault.ended_ms + ttl_ms
        if fault.kind in (
            FaultKind.KILL_WORKER,
            FaultKind.KILL_IDLE_WORKER,
            FaultKind.DRAIN_WORKER,
        ):
            end = 2**62  # the process never comes back
        window = (fault.started_ms, end)
        if fault.kind in REDIS_KINDS:
            everyone.append(window)
        elif fault.owner_id:
            by_owner.setdefault(fault.owner_id, []).append(window)
    found = []
    for sample in samples:
        windows = everyone + by_owner.get(sample.owner_id, [])
        if not _overlaps(sample.expires_ms, sample.expires_ms, windows):
            found.append(f"{sample.run_id} {sample.action} owner {sample.owner_id}")
    return found


def takeovers(snapshot: Snapshot) -> dict[str, int]:
    """Runs claimed again after an expiry or a release, by what handed them over."""
    causes: Counter[str] = Counter()
    for run in snapshot.runs.values():
        handed = None
        for event in run.events:
            if event.type in ("lease_expired", "released"):
                handed = event.type
            elif event.type == "claimed" and handed is not None:
                causes[handed] += 1
                handed = None
    return {"runs": sum(causes.values()), **causes}


def stale_figures(
    snapshot: Snapshot, faults: list[Fault], processes: list[Process]
) -> dict[str, int]:
    """What the paused and partitioned workers lost, and what Redis refused them."""
    owners = {f.owner_id for f in faults if f.kind in STALE_KINDS and f.owner_id}
    figures: Counter[str] = Counter(stale_owners=len(owners))
    for run in snapshot.runs.values():
        for event in run.events:
            evidence = takeover_evidence(event)
            if evidence is not None and evidence.get("owner_id") in owners:
                figures["runs_taken_from_stale_owners"] += 1
    for process in processes:
        if process.owner_id in owners:
            log = process.log()
            for name, pattern in LOG_PATTERNS.items():
                figures[name] += len(pattern.findall(log))
    return dict(figures)


def past_lease(snapshot: Snapshot, faults: list[Fault], side_dir: Path) -> dict[str, Any]:
    """Handler steps an owner took after its lease expired in Redis (from the side channel).

    A worker that cannot renew must stop its handler before the lease expires
    (jeopardy); one that was frozen (SIGSTOP) cannot, and stops when it wakes and
    hears LOST. Both are counted, apart, with the worst overrun in ms; the
    running ones also name the fault that was under way.
    """
    frozen = {f.owner_id for f in faults if f.kind == FaultKind.PAUSE_WORKER and f.owner_id}
    overruns: dict[str, list[int]] = {"frozen": [], "running": []}
    running: list[str] = []
    for run in snapshot.runs.values():
        for owner, expires_ms, late_ms in _overruns(run, side_dir):
            bucket = "frozen" if owner in frozen else "running"
            overruns[bucket].append(late_ms)
            if bucket == "running":
                during = [
                    f.kind.value
                    for f in faults
                    if _overlaps(expires_ms, expires_ms, [(f.started_ms, f.ended_ms)])
                ]
                running.append(f"{run.id} {owner} +{late_ms}ms during {during or 'no fault'}")
    figures: dict[str, Any] = {
        name: {"runs": len(values), "max_ms": max(values, default=None)}
        for name, values in overruns.items()
    }
    figures["running_detail"] = running[:10]
    return figures


def _overruns(run: StoredRun, side_dir: Path) -> list[tuple[str, int, int]]:
    """(owner, lease expiry ms, ms past it) for each expired owner that kept stepping."""
    ticks = read_ticks(side_dir, run.id)
    found = []
    for event in run.events if ticks else []:
        evidence = takeover_evidence(event)
        if evidence is None:
            continue
        owner, expires_ms = evidence.get("owner_id"), int(evidence["lease_expires_at_ms"])
        late = [
            int(at * 1000) - expires_ms
            for who, fence, at in ticks
            if who == owner and fence == evidence.get("fence")
        ]
        if late and max(late) > 0:
            found.append((str(owner), expires_ms, max(late)))
    return found


def log_figures(processes: list[Process]) -> dict[str, int]:
    """The same log counts over every worker (kills and outages cause them too)."""
    figures: Counter[str] = Counter()
    for process in processes:
        log = process.log()
        for name, pattern in LOG_PATTERNS.items():
            figures[name] += len(pattern.findall(log))
    return dict(figures)
