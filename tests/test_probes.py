"""``leasehold probe ...``: the exit status Docker healthchecks and Kubernetes probes read.

Each probe runs as the orchestrator runs it: a fresh ``leasehold`` process with
the container's environment, judged by its exit status alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from app.stack.embedded import free_port
from tests.support.memory import SmallRedis
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT, Processes

KEY = "k-probe-0123456789abcdef"

pytestmark = pytest.mark.slow


def probe(processes: Processes, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **processes.env, **extra_env, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "probe", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def api_port(url: str) -> str:
    return str(urlsplit(url).port)


def test_api_probe_passes_on_readyz_behind_keys_using_the_servers_own_key(
    processes: Processes,
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    # the API's container has LEASEHOLD_API_KEYS, not LEASEHOLD_API_KEY: the probe uses it
    result = probe(
        processes,
        "api",
        "--path",
        "/readyz",
        LEASEHOLD_API_PORT=api_port(url),
        LEASEHOLD_API_KEYS=KEY,
    )
    assert result.returncode == 0, result.stderr
    assert "HTTP 200" in result.stdout


def test_api_probe_fails_with_a_wrong_key_or_no_api(processes: Processes) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    wrong = probe(
        processes,
        "api",
        LEASEHOLD_API_PORT=api_port(url),
        LEASEHOLD_API_KEY="k-wrong-0123456789abc",
    )
    assert wrong.returncode == 1
    assert "HTTP 401" in wrong.stderr
    nobody = probe(processes, "api", LEASEHOLD_API_PORT=str(free_port()))
    assert nobody.returncode == 1


def test_redis_probe_passes_with_redis_and_fails_without(processes: Processes) -> None:
    assert probe(processes, "redis").returncode == 0
    down = probe(processes, "redis", LEASEHOLD_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert down.returncode == 1
    assert "unreachable" in down.stderr


async def test_worker_probe_passes_once_a_worker_on_this_host_heartbeats(
    processes: Processes,
) -> None:
    before = probe(processes, "worker")
    assert before.returncode == 1, "no worker yet"
    assert "no worker on" in before.stderr
    processes.worker()

    async def exit_status() -> int:
        return probe(processes, "worker").returncode

    await eventually(exit_status, until=lambda code: code == 0, what="worker probe passing")


def test_worker_probe_does_not_fail_a_worker_for_a_redis_outage(processes: Processes) -> None:
    result = probe(processes, "worker", LEASEHOLD_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 0
    assert "not judged" in result.stdout


def test_worker_probe_does_not_fail_a_worker_because_redis_is_full(
    processes: Processes, small_redis: SmallRedis
) -> None:
    small_redis.set_max(small_redis.used_bytes() // 2)  # past maxmemory: SETs are refused
    result = probe(processes, "worker", LEASEHOLD_REDIS_URL=small_redis.url)
    assert result.returncode == 0, result.stderr
    assert "maxmemory" in result.stdout and "not judged" in result.stdout
    small_redis.set_max(0)
    assert probe(processes, "worker", LEASEHOLD_REDIS_URL=small_redis.url).returncode == 1
