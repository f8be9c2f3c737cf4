"""Real subprocesses for process-level tests: workers, API servers, reconcilers.

Each process gets the test's Redis URL and key prefix through LEASEHOLD_*
variables, logs to a file under the test's tmp dir (printed on failure by
pytest's tmp_path retention), and is killed at teardown if still alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app.embedded import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_HANDLERS = "app.demo,tests.support.handlers,tests.support.effect_handlers"


@dataclass
class Proc:
    """One child process and where its output goes."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    def signal(self, sig: signal.Signals) -> None:
        """Send a real signal."""
        self.popen.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        """Wait for exit; returns the exit code."""
        return self.popen.wait(timeout=timeout_s)

    def alive(self) -> bool:
        """Still running?"""
        return self.popen.poll() is None

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Processes:
    """Starts children with the test's environment; reaps them all at teardown."""

    env: dict[str, str]
    log_dir: Path
    started: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> Proc:
        """Start ``python -m app.cli <args>``."""
        env = {**os.environ, **self.env, **(extra_env or {})}
        env["PYTHONPATH"] = str(REPO_ROOT)
        log_path = self.log_dir / f"{name}-{len(self.started)}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "app.cli", *args],
                env=env,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        proc = Proc(name, popen, log_path)
        self.started.append(proc)
        return proc

    def worker(self, *args: str, **extra_env: str) -> Proc:
        """Start a worker (with its built-in reconciler unless told otherwise)."""
        return self.spawn("worker", ["worker", *args], extra_env)

    def api(self, **extra_env: str) -> tuple[Proc, str]:
        """Start an API server on a free port; returns it and its base URL once healthy."""
        port = free_port()
        proc = self.spawn("api", ["api", "--port", str(port)], extra_env)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        return proc, url

    def reap(self) -> None:
        """Kill whatever is still running (SIGCONT first, in case a test paused it)."""
        for proc in self.started:
            if proc.alive():
                proc.popen.send_signal(signal.SIGCONT)
                proc.popen.kill()
                proc.popen.wait(timeout=10)


def wait_healthy(url: str, proc: Proc, timeout_s: float = 30.0) -> None:
    """Poll /healthz until the API answers; fail with its log if it dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited early:\n{proc.log()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{proc.name} did not become healthy:\n{proc.log()}")


def base_env(redis_url: str, prefix: str, *, lease_ttl_s: float) -> dict[str, str]:
    """LEASEHOLD_* variables every child of a test shares."""
    return {
        "LEASEHOLD_REDIS_URL": redis_url,
        "LEASEHOLD_PREFIX": prefix,
        "LEASEHOLD_LEASE_TTL_S": str(lease_ttl_s),
        "LEASEHOLD_HANDLERS": TEST_HANDLERS,
        "LEASEHOLD_DRAIN_TIMEOUT_S": "5",
        "LEASEHOLD_RETRY_BACKOFF_S": "0.05",
        "LEASEHOLD_LOG_LEVEL": "INFO",
    }


@pytest.fixture
def processes(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Processes]:
    """Children for this test, sharing its Redis and prefix; all reaped afterwards."""
    procs = Processes(base_env(redis_url, prefix, lease_ttl_s=1.0), tmp_path)
    yield procs
    procs.reap()
