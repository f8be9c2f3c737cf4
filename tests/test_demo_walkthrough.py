"""`leasehold demo kill-worker`: the scripted story ends the way the README says."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import REPO_ROOT


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "kill-worker", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )


def test_killing_the_owner_ends_the_stream_orphaned() -> None:
    result = demo("--lease-ttl-s", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    kill = next(i for i, line in enumerate(lines) if line.startswith("-> kill -9"))
    assert "claimed by" in lines[kill - 1]
    assert "== orphaned: lease_expired: orphaned: executor lease expired" in lines[-2]
    assert lines[-1].endswith(
        "ended orphaned: orphaned: executor lease expired (attempt 1, fence 2)"
    )


def test_with_retry_another_worker_takes_the_run_over_and_finishes_it() -> None:
    result = demo("--retry", "--lease-ttl-s", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    after_kill = result.stdout.split("-> kill -9", 1)[1]
    assert "stopped renewing at" in after_kill
    assert "requeued for attempt 2 (lease_expired)" in after_kill
    assert "claimed by" in after_kill
    assert "== succeeded" in after_kill
    assert "(attempt 2, fence 3)" in result.stdout.splitlines()[-1]
