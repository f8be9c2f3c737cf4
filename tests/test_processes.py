"""The one process harness (app/stack/processes.py), with real children.

What every user of it (``leasehold up``, the demo, the benchmarks, the tests, the
soak) relies on: a child that dies before it is healthy is reported with its
log instead of being waited for, nothing answering is a clear timeout, and a
stop arrives as exactly one SIGTERM.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from app.stack.embedded import free_port
from app.stack.processes import Child, ProcessNotReady, child_env, spawn, stop_all, wait_healthy
from tests.support.processes import REPO_ROOT


def nobody_listens() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_child_that_exits_early_is_reported_with_its_log(tmp_path: Path) -> None:
    child = spawn(
        "bad", ["no-such-command"], env=child_env(), log_path=tmp_path / "bad.log", cwd=REPO_ROOT
    )
    with pytest.raises(ProcessNotReady, match=r"(?s)bad \(pid \d+\) exited with status 2.*No such"):
        wait_healthy(nobody_listens(), child, timeout_s=60)
    assert not child.alive()


def test_nothing_answering_is_a_timeout_and_a_stop_is_not() -> None:
    with pytest.raises(ProcessNotReady, match=r"did not answer in 0\.2s"):
        wait_healthy(nobody_listens(), timeout_s=0.2, poll_s=0.05)
    assert wait_healthy(nobody_listens(), timeout_s=60, stopped=lambda: True) is False


def test_stop_all_terminates_once_and_kills_only_what_stays(tmp_path: Path) -> None:
    polite = spawn(
        "polite",
        ["--bind", "127.0.0.1", str(free_port())],
        env=child_env(),
        module="http.server",
        log_path=tmp_path / "polite.log",
    )
    stubborn = spawn(
        "stubborn",
        [],
        env=child_env({"PYTHONPATH": str(REPO_ROOT)}),
        module="tests.support.ignores_sigterm",
        log_path=tmp_path / "stubborn.log",
        cwd=REPO_ROOT,
    )
    eventually_logged(stubborn, "ready")
    killed = stop_all([polite, stubborn], grace_s=1.0)
    assert killed == [stubborn]
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL


def eventually_logged(child: Child, text: str) -> None:
    """Poll the child's log until ``text`` appears (it has installed its handler)."""
    deadline = time.monotonic() + 60
    while text not in child.log():
        assert child.alive() and time.monotonic() < deadline, child.log()
        time.sleep(0.05)
