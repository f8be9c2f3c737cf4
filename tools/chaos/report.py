"""The chaos run's summary: printed for people, written as JSON and text for the record.

``make soak`` writes ``bench/out/chaos/soak-<seed>-<duration>s.{json,txt}`` (the CI
run writes into its tmp dir): runs by final status, faults by kind (with each
fault's target and window), invariant violations (which must be none), orphan
detection times against the TTL + reconcile-interval bound, takeovers, stale
writes rejected, real effect executions and what the SSE followers went through.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos.checker import Snapshot, Violation
from tools.chaos.cluster import ClusterConfig
from tools.chaos.faults import Fault
from tools.chaos.janitor import Janitor
from tools.chaos.promises import Gone
from tools.chaos.tap import ActivityTap
from tools.chaos.workload import Workload

SHOWN_VIOLATIONS = 50


@dataclass
class ChaosReport:
    """Everything a chaos run found."""

    seed: int
    duration_s: float
    started_ms: int
    elapsed_s: float
    lanes: int
    cluster: ClusterConfig
    snapshot: Snapshot
    faults: list[Fault]
    violations: list[Violation]
    detection: dict[str, Any]
    takeovers: dict[str, int]
    stale: dict[str, int]
    logs: dict[str, int]
    past_lease: dict[str, Any]
    effects: dict[str, int]
    workload: Workload
    api_retries: int
    janitor: Janitor
    gone: Gone
    tap: ActivityTap
    returns_compared: Counter[str]
    # the re-run workload's outcomes (reruns, rerun_404, rerun_409, ...)
    reruns: Counter[str] = field(default_factory=Counter)
    # the kill_idle_worker faults: how many found a registered worker, rows stranded
    handoffs: dict[str, int] = field(default_factory=dict)
    # the neighbour tenant's answers (201, 429...) and cross-namespace reads seen
    tenants: dict[str, int] = field(default_factory=dict)
    # the deploy faults' effect: runs claimed under more than one build
    builds: dict[str, int] = field(default_factory=dict)

    @property
    def faults_by_kind(self) -> dict[str, int]:
        """How many faults of each kind were injected."""
        return dict(Counter(fault.kind.value for fault in self.faults))

    @property
    def violations_by_kind(self) -> dict[str, int]:
        """How many violations of each invariant were found."""
        return dict(Counter(violation.kind for violation in self.violations))

    def summary(self) -> dict[str, Any]:
        """The JSON document: figures first, then the detail behind them."""
        follows = self.workload.follows
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "elapsed_s": self.elapsed_s,
            "lanes": self.lanes,
            "machine": _machine(),
            "cluster": {
                "workers": self.cluster.workers,
                "apis": self.cluster.apis,
                "lease_ttl_s": self.cluster.lease_ttl_s,
                "reconcile_interval_s": round(self.cluster.reconcile_interval_s, 3),
                "concurrency": self.cluster.concurrency,
                "drain_timeout_s": self.cluster.drain_timeout_s,
                "broken_build": self.cluster.lua_dir is not None,
            },
            "runs": len(self.snapshot.runs),
            "runs_by_status": dict(Counter(run.status for run in self.snapshot.runs.values())),
            "runs_by_kind": dict(Counter(t.plan.kind for t in self.workload.runs)),
            "faults_by_kind": self.faults_by_kind,
            "violations": len(self.violations),
            "violations_by_kind": self.violations_by_kind,
            "orphan_detection": self.detection,
            "taken_over": self.takeovers,
            "stale_owners": self.stale,
            "worker_logs": self.logs,
            "handler_past_lease": self.past_lease,
            "effect_executions": self.effects,
            "followers": {
                "client": sum(1 for f in follows if f.mode == "client"),
                "raw": sum(1 for f in follows if f.mode == "raw"),
                "connections": sum(f.connections for f in follows),
                "events_received": sum(len(f.received) for f in follows),
            },
            "cancels": self.workload.cancels,
            "cancels_acked_202": sum(1 for t in self.workload.runs if t.cancel_acked),
            "api_answers": dict(sorted(self.workload.api.answers.by_status.items())),
            "creates_refused_503": self.workload.api.answers.creates_refused,
            "janitor": {
                **self.janitor.outcomes,
                "deleted_in_all": len(self.janitor.deleted),
                "gone_deleted": len(self.gone.deleted),
                "gone_maybe_deleted": len(self.gone.maybe_deleted),
                "gone_unexplained": len(self.gone.vanished),
            },
            "reruns": dict(self.reruns),
            "handoffs": self.handoffs,
            "tenants": self.tenants,
            "builds": self.builds,
            "activity_tap": {"entries": self.tap.entries, "gaps": self.tap.gaps},
            "handler_returns": dict(self.returns_compared),
            "person": self.workload.decisions,
            "api_retries": self.api_retries,
            "fault_log": [_fault(fault, self.started_ms) for fault in self.faults],
            "violation_list": [asdict(v) for v in self.violations[:SHOWN_VIOLATIONS]],
        }

    def text(self) -> str:
        """The summary for people."""
        s = self.summary()
        detection = s["orphan_detection"]
        lines = [
            f"chaos run: seed {s['seed']}, {s['duration_s']}s of faults in {s['lanes']} lane(s), "
            f"{s['elapsed_s']}s total",
            f"machine:   {s['machine']}",
            f"cluster:   {_kv(s['cluster'])}",
            f"runs:      {s['runs']}  {_kv(s['runs_by_status'])}",
            f"kinds:     {_kv(s['runs_by_kind'])}",
            f"faults:    {sum(s['faults_by_kind'].values())}  {_kv(s['faults_by_kind'])}",
            f"VIOLATIONS: {s['violations']}  {_kv(s['violations_by_kind'])}",
            f"detection: {detection['count']} expired leases acted on "
            f"({detection['during_redis_downtime']} while Redis was down); last renewal -> "
            f"detection p50 {detection['p50_ms']} ms, p99 {detection['p99_ms']} ms, max "
            f"{detection['max_ms']} ms; bound TTL+interval {detection['bound_ms']} ms "
            f"({detection['over_bound']} over), with jitter {detection['bound_with_jitter_ms']}"
            f" ms ({detection['over_bound_with_jitter']} over); no fault explains "
            f"{len(detection['unexplained'])}: {detection['unexplained'][:5]}",
            f"taken over: {_kv(s['taken_over'])}",
            f"stale:     {_kv(s['stale_owners'])}",
            f"all logs:  {_kv(s['worker_logs'])}",
            f"past lease: {_kv(s['handler_past_lease'])}",
            f"effects:   {_kv(s['effect_executions'])}",
            f"followers: {_kv(s['followers'])}",
            f"person:    {_kv(s['person'])}; cancels {s['cancels']} "
            f"({s['cancels_acked_202']} answered 202); API calls retried {s['api_retries']}",
            f"answers:   {_kv(s['api_answers'])}; creates refused 503 {s['creates_refused_503']}",
            f"janitor:   {_kv(s['janitor'])}; tap {_kv(s['activity_tap'])}",
            f"reruns:    {_kv(s['reruns'])}",
            f"hand-offs: {_kv(s['handoffs'])} (kill_idle_worker: registered found, rows stranded)",
            f"tenants:   {_kv(s['tenants'])} (the neighbour namespace: answers, cross reads)",
            f"builds:    {_kv(s['builds'])} (deploy faults, runs claimed under 2+ builds, "
            "pinned runs, runs the operator upgraded)",
            f"returns:   {_kv(s['handler_returns'])} (handler returns checked against outputs)",
        ]
        lines += [f"  fault {_kv(fault)}" for fault in s["fault_log"]]
        lines += [
            f"  VIOLATION {v['kind']} {v['run_id']}: {v['detail']}" for v in s["violation_list"]
        ]
        return "\n".join(lines)

    def write(self, out_dir: Path, name: str) -> tuple[Path, Path]:
        """Write ``<name>.json`` and ``<name>.txt`` into ``out_dir``; returns both paths."""
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path, text_path = out_dir / f"{name}.json", out_dir / f"{name}.txt"
        json_path.write_text(json.dumps(self.summary(), indent=2, default=str) + "\n")
        text_path.write_text(self.text() + "\n")
        return json_path, text_path


def _fault(fault: Fault, started_ms: int) -> dict[str, Any]:
    return {
        "at_s": round((fault.started_ms - started_ms) / 1000, 1),
        "kind": fault.kind.value,
        "target": fault.target,
        "owner_id": fault.owner_id,
        "held_runs": fault.held_runs,
        "lasted_ms": fault.ended_ms - fault.started_ms,
        **fault.details,
    }


def _kv(values: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in values.items())


def _machine() -> str:
    import os

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python " + (
        platform.python_version()
    )
