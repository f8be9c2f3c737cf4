"""Plumbing shared by the benchmarks: child processes, Redis counters, statistics.

Every child (worker, API) is started with ``python -m app.cli.launch`` from the repo
root through :mod:`app.stack.processes` (the one process harness), logs to
``bench/out/logs`` and is stopped by its own pid (SIGTERM, then SIGKILL), the
way the peer harness stops its workers. Redis counters come from
``INFO commandstats`` and ``INFO stats`` of the benchmark's own redis-server.
"""

from __future__ import annotations

import compileall
import contextlib
import functools
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from app.stack import processes
from app.stack.embedded import EmbeddedRedis
from app.stack.processes import Child, child_env
from app.store.keys import QueueKeys
from app.store.redis.connection import async_client
from app.store.runs.store import RunStore

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = REPO_ROOT / "bench" / "out"
LOG_DIR = OUT_DIR / "logs"
BENCH_HANDLERS = "app.demo,bench.handlers"
STOP_GRACE_S = 10.0
# commands the benchmark itself sends to read counters; never charged to the worker
COUNTER_READS = 3  # INFO calls in one counters() snapshot: requests and replies it adds
OBSERVER_COMMANDS = frozenset({"info", "config|set", "config", "slowlog|get", "slowlog|reset"})


@functools.cache
def compile_bytecode(root: Path = REPO_ROOT) -> None:
    """Compile ``app/`` and ``bench/`` once, so children start from bytecode.

    An installed package (a wheel, a container image, every peer in its venv) is
    imported from compiled ``.pyc`` files. This checkout is installed in editable
    mode, and with ``PYTHONDONTWRITEBYTECODE`` set (it is on some machines) every
    worker would compile the sources again at start-up, inside the timed window.
    """
    for package in ("app", "bench"):
        compileall.compile_dir(root / package, quiet=1)


def spawn(name: str, args: list[str], env: dict[str, str], root: Path = REPO_ROOT) -> Child:
    """Start ``python -m app.cli.launch <args>`` with ``env`` added; output goes to a log file.

    ``root``: the checkout whose ``app`` the child imports (another tree for an A/B pair,
    e.g. a detached worktree of main, run with this venv).
    """
    compile_bytecode(root)
    log_path = LOG_DIR / f"{name}.log"
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(args)}\n".encode())
    full_env = child_env(env, {"PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"})
    return processes.spawn(name, args, env=full_env, log_path=log_path, append=True, cwd=root)


def stop(proc: Child | None, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child we started, then SIGKILL it if it has not exited after ``grace_s``."""
    if proc is not None:
        proc.stop(grace_s)


@contextlib.contextmanager
def running(name: str, args: list[str], env: dict[str, str]) -> Iterator[Child]:
    """A child process for the duration of a ``with`` block."""
    proc = spawn(name, args, env)
    try:
        yield proc
    finally:
        stop(proc)


@dataclass(frozen=True)
class RedisCounters:
    """A snapshot of the server's command and I/O counters."""

    calls: dict[str, int]  # command name -> calls, including calls made inside scripts
    reads: int  # read events processed: one per batch of requests a client sent
    writes: int  # write events processed: one per batch of replies flushed to a client
    cpu_s: float = 0.0  # the server's own CPU time, user + system

    def minus(self, earlier: RedisCounters) -> RedisCounters:
        """Counter deltas since ``earlier``, without the benchmark's own INFO/CONFIG calls."""
        calls = {
            name: count - earlier.calls.get(name, 0)
            for name, count in self.calls.items()
            if name not in OBSERVER_COMMANDS and count != earlier.calls.get(name, 0)
        }
        return RedisCounters(
            calls,
            self.reads - earlier.reads,
            self.writes - earlier.writes,
            self.cpu_s - earlier.cpu_s,
        )

    @property
    def scripts(self) -> int:
        """EVALSHA and EVAL calls."""
        return sum(count for name, count in self.calls.items() if name in ("evalsha", "eval"))

    @property
    def total(self) -> int:
        """Every command executed, top-level and inside scripts."""
        return sum(self.calls.values())


async def counters(client: aioredis.Redis) -> RedisCounters:
    """Read ``INFO commandstats``, ``INFO cpu`` and ``INFO stats``.

    The closing ``INFO stats`` call is counted in ``reads``/``writes``: callers
    subtract :data:`COUNTER_READS`. The INFO commands themselves are dropped from
    ``calls`` by :meth:`RedisCounters.minus`.
    """
    commandstats = await client.info("commandstats")
    cpu = await client.info("cpu")
    stats = await client.info("stats")
    calls = {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in commandstats.items()
        if isinstance(value, dict)
    }
    return RedisCounters(
        calls,
        int(stats["total_reads_processed"]),
        int(stats["total_writes_processed"]),
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
    )


def children_cpu_s() -> float:
    """CPU time (user + system) of every child process reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile, the same formula as the peer harness's ``pct``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = int(rank), min(int(rank) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: list[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages: a busy box skews every number."""
    return os.getloadavg()


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


@dataclass
class PrivateRedis:
    """A benchmark's own throwaway redis-server: its URL, a client, a scratch directory."""

    url: str
    client: aioredis.Redis
    data_dir: Path


@contextlib.asynccontextmanager
async def private_redis(name: str, port: int = 0) -> AsyncIterator[PrivateRedis]:
    """A redis-server without persistence, started for one benchmark and stopped after it.

    Never the machine's shared Redis: other people's keys and load would be measured too.
    ``port``: a fixed one (a range agreed with others sharing the machine), else a free one.
    """
    port = port or int(os.environ.get("BENCH_REDIS_PORT", "0"))
    with tempfile.TemporaryDirectory(prefix=f"leasehold-{name}-") as data_dir:
        server = EmbeddedRedis(data_dir=Path(data_dir), port=port, appendonly=False).start()
        client = async_client(server.url)
        try:
            yield PrivateRedis(server.url, client, Path(data_dir))
        finally:
            await client.aclose()
            server.stop()


async def header(client: aioredis.Redis, label: str) -> dict[str, Any]:
    """What every result line starts with: when, the label, the machine and its load."""
    info = await client.info("server")
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "label": label,
        "machine": {**machine(), "redis": info["redis_version"]},
        "load_at_start": load_average(),
    }


def record(result: dict[str, Any]) -> Path:
    """Append one JSON line to ``bench/out/results.jsonl``; returns the file."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / "results.jsonl"
    with path.open("a") as out:
        out.write(json.dumps(result) + "\n")
    return path


def log(*parts: object) -> None:
    """Progress lines on stderr, so stdout carries only the result table."""
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


@dataclass
class Bench:
    """The benchmark's own Redis and the store on it; one per ``make bench``."""

    url: str
    client: aioredis.Redis
    store: RunStore
    queue: str = "default"

    @property
    def keys(self) -> QueueKeys:
        """Key names of the benchmark's queue."""
        return self.store.keys(self.queue)

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a worker or API child on this Redis."""
        return {
            "LEASEHOLD_REDIS_URL": self.url,
            "LEASEHOLD_HANDLERS": BENCH_HANDLERS,
            "LEASEHOLD_QUEUES": self.queue,
            **extra,
        }

    async def reset(self) -> None:
        """Empty the benchmark's own server (never a Redis we did not start)."""
        await self.client.flushall()

    async def unfinished(self) -> int:
        """Runs not yet terminal: queued, waiting for a retry, or leased (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.keys.queued)  # runs in the queue's lanes (the scripts keep the count)
        pipe.zcard(self.keys.delayed)
        pipe.zcard(self.keys.leases)
        counts: list[int | str | None] = await pipe.execute()
        return sum(int(count or 0) for count in counts)

    async def statuses(self, run_ids: list[str], chunk: int = 1000) -> dict[str, int]:
        """How many of ``run_ids`` are in each status."""
        seen: dict[str, int] = {}
        for start in range(0, len(run_ids), chunk):
            pipe = self.client.pipeline(transaction=False)
            for run_id in run_ids[start : start + chunk]:
                pipe.hget(self.keys.run(run_id), "status")
            for status in await pipe.execute():
                name = status or "missing"
                seen[name] = seen.get(name, 0) + 1
        return seen
