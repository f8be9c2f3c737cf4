"""The chaos harness in CI: a short run with every fault, and proof that it can fail.

``pytest -m chaos`` selects these; they also run in ``make test``. The soak
(``make soak DURATION=600 SEED=...``) is the same harness, longer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.chaos.broken import write_unfenced_scripts
from tools.chaos.cluster import ClusterConfig
from tools.chaos.faults import FaultKind
from tools.chaos.scenario import ChaosConfig, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

CI_SEED = 20261130
# what the broken build lets through, and what the checker names it
STALE_WRITE_VIOLATIONS = {
    "fence_backwards",
    "stale_write_accepted",
    "terminal_events",
    "terminal_not_last",
    "terminal_mismatch",
    "stale_output",
    "effect_repeated",
}


async def test_a_minute_of_every_fault_breaks_no_invariant(tmp_path: Path) -> None:
    report = await run_chaos(ChaosConfig(duration_s=60, seed=CI_SEED, work_dir=tmp_path))
    print(report.text())
    assert set(report.faults_by_kind) == {kind.value for kind in FaultKind}
    assert report.snapshot.runs, "the workload created no run"
    assert report.janitor.deleted, "the janitor deleted no run: the delete invariants saw nothing"
    assert report.reruns["reruns"], "nothing was re-run: the re-run invariants saw nothing"
    assert report.tenants.get("201") and report.tenants.get("429"), (
        "the neighbour tenant made no run or met no quota: its invariants saw nothing"
    )
    assert report.violations == [], report.text()


async def test_the_checker_catches_a_build_whose_writes_are_not_fenced(tmp_path: Path) -> None:
    lua_dir = write_unfenced_scripts(tmp_path / "unfenced-lua")
    stale_faults = (FaultKind.PAUSE_WORKER, FaultKind.PARTITION_WORKER)
    config = ChaosConfig(
        duration_s=30,
        seed=CI_SEED,
        work_dir=tmp_path / "run",
        cluster=ClusterConfig(lua_dir=lua_dir),
        fault_kinds=stale_faults,
        first_faults=stale_faults,
    )
    report = await run_chaos(config)
    print(report.text())
    caught = set(report.violations_by_kind) & STALE_WRITE_VIOLATIONS
    assert caught, f"the checker missed the unfenced build:\n{report.text()}"
