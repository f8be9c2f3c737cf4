"""Real subprocesses for process-level tests: workers, API servers, reconcilers.

Each process gets the test's Redis URL and key prefix through LEASEHOLD_*
variables, logs to a file under the test's tmp dir (printed on failure by
pytest's tmp_path retention), and is killed at teardown if still alive. The
processes themselves are :class:`app.stack.processes.Child`, the one harness shared
with ``leasehold up``, the demo, the benchmarks and the soak.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.stack.embedded import free_port
from app.stack.processes import CLI_MODULE, Child, child_env, spawn, wait_healthy

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_HANDLERS = (
    "app.demo,tests.support.handlers,tests.support.effect_handlers,tests.support.rate_handlers,"
    "tests.support.wait_handlers,tests.support.family_handlers,tests.support.drift_handlers"
)
PROBE_TIMEOUT_S = 60.0
# how long an API child may take to answer /healthz: a bound for one that never will, not
# a speed check. The harness's 30 s was reached in a niced run of tests/console at load
# ~10 (beside chromium), with nothing in the API's log yet: a niced child gets a sliver
# of a core while un-niced work holds both
HEALTHY_TIMEOUT_S = 120.0
# no .env file is read by this session or its children: a developer's own (in the checkout,
# where most children start) must not change what the tests start (tests/conftest.py)
NO_ENV_FILE = {"LEASEHOLD_ENV_FILE": ""}
# nor does any find the address book of a `leasehold up` a developer runs in the checkout
# (app.cli.address): a state directory no test's `up` writes to (tests/process/test_up.py
# names its own), so every child uses the Redis and API its test gives it
NO_STACK = {"LEASEHOLD_STATE_DIR": str(REPO_ROOT / "test-artifacts" / "no-stack-here")}
ISOLATED = NO_ENV_FILE | NO_STACK


def env_without_settings(**extra: str) -> dict[str, str]:
    """This process's environment without its LEASEHOLD_* settings, for a child of the checkout.

    No .env file is read either, nor an address book; ``extra`` goes on top.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    return {**env, **ISOLATED, "PYTHONPATH": str(REPO_ROOT), **extra}


def python_prints(code: str) -> str:
    """The last line ``code`` prints in a fresh interpreter started in the checkout.

    For what a process imports or sets up at start: nothing this test session
    imported counts there.
    """
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


@dataclass
class Processes:
    """Starts children with the test's environment; reaps them all at teardown."""

    env: dict[str, str]
    log_dir: Path
    started: list[Child] = field(default_factory=list)

    def spawn(
        self,
        name: str,
        args: list[str],
        extra_env: dict[str, str] | None = None,
        *,
        module: str = CLI_MODULE,
    ) -> Child:
        """Start ``python -m app.cli.launch <args>`` (the console script), logging to tmp.

        ``module``: a harness that wraps the console script (tests.support.claim_probe).
        """
        env = child_env(self.env, extra_env or {}, {"PYTHONPATH": str(REPO_ROOT)})
        log_path = self.log_dir / f"{name}-{len(self.started)}.log"
        child = spawn(name, args, env=env, log_path=log_path, cwd=REPO_ROOT, module=module)
        self.started.append(child)
        return child

    def worker(self, *args: str, **extra_env: str) -> Child:
        """Start a worker (with its built-in reconciler unless told otherwise)."""
        return self.spawn("worker", ["worker", *args], extra_env)

    def api(self, **extra_env: str) -> tuple[Child, str]:
        """Start an API server on a free port; returns it and its base URL once healthy.

        Children started after the first API reach it as LEASEHOLD_API_URL: demo.agent's
        model is that API's /demo/model, never a URL from the run's input.
        """
        port = free_port()
        proc = self.spawn("api", ["api", "--port", str(port)], extra_env)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, timeout_s=HEALTHY_TIMEOUT_S)
        self.env.setdefault("LEASEHOLD_API_URL", url)
        return proc, url

    def reap(self) -> None:
        """Kill whatever is still running (SIGCONT first, in case a test paused it)."""
        for child in self.started:
            child.kill()


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


def run_cli(
    *args: str, env: dict[str, str], log_path: Path, timeout_s: float = 120.0
) -> tuple[int, str]:
    """Run ``leasehold <args>`` to its end with ``env`` alone; its exit status and output.

    For commands expected to stop by themselves, e.g. on a setting error (exit 2).
    """
    child = spawn(
        "cli",
        list(args),
        env=child_env(env, {"PYTHONPATH": str(REPO_ROOT)}),
        log_path=log_path,
        cwd=REPO_ROOT,
    )
    try:
        returncode = child.wait(timeout_s)
    finally:
        child.kill()
    return returncode, child.log()
