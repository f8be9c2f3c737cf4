"""How long a worker takes from spawn to its first claim and its first finished run.

``python -m bench.worker_startup [--reps 15] [--target PYTHON:ROOT ...]`` queues a
few no-op ``demo.echo`` runs on its own redis-server, spawns ``leasehold worker
--concurrency 50`` (the ``leasehold`` script beside PYTHON, from ROOT), and polls
Redis every 2 ms until the first run is claimed (the queued count drops) and until
the first one is finished (``queued + delayed + leases`` drops: the peers'
``t_first_progress``, ``/work/shared/bench-peers/bench.py``). It also reads the
worker's own CPU time (``/proc/<pid>/stat``) at that moment: on a shared machine
the steadier figure, since waiting for a core is not in it; and the CPU by the first
claim (read when the bench sees the queued count drop, so a poll late).

Several ``--target`` are measured in turn, repetition by repetition (A, B, A, B...),
so a change of the machine's load hits both alike. Each ROOT is compiled to
bytecode first, as an installed wheel or container image is: with
``PYTHONDONTWRITEBYTECODE`` set, an editable checkout would otherwise compile its
sources inside the timed window. Where the time goes:
``python -X importtime -c 'import app.cli.main, app.executor.worker'``.

``--callgrind`` counts instead the instructions a worker executes from its first one to
the moment it sends its first claim (``valgrind --tool=callgrind``, one start per
target, against a Redis already holding the scripts): on a machine shared with others
the figure that does not depend on the load. The worker runs as ``leasehold worker``
does, with ``LeaseStore.finish_and_claim`` wrapped to end the process at its first
call (:data:`CLAIM_PROBE`).
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import harness

QUEUED = 10
POLL_S = 0.002
TIMEOUT_S = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Target:
    """One interpreter (a venv's python) and the checkout it runs the worker from."""

    python: Path
    root: Path
    claim_ms: list[float] = field(default_factory=list)
    done_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    claim_cpu_ms: list[float] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Target:
        """``PYTHON:ROOT``; either side may be left empty for this interpreter / checkout."""
        python, _, root = text.partition(":")
        return cls(Path(python or sys.executable), Path(root or harness.REPO_ROOT))

    def command(self) -> list[str]:
        """The ``leasehold`` script of that venv, as the peers' harness starts a worker."""
        script = self.python.parent / "leasehold"
        head = [str(script)] if script.exists() else [str(self.python), "-m", "app.cli"]
        return [*head, "worker", "--concurrency", "50"]


def cpu_ms(pid: int) -> float:
    """User + system CPU the process has used so far (clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / CLOCK_TICKS


def one_start(target: Target, url: str, bench: harness.Bench) -> None:
    """Spawn one worker with runs waiting; record when it claimed and finished the first."""
    poller = redis.Redis.from_url(url)
    keys = bench.keys
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("LEASEHOLD_") and key != "PYTHONPATH"
    }
    env |= {
        "LEASEHOLD_REDIS_URL": url,
        "LEASEHOLD_HANDLERS": "app.demo",
        "LEASEHOLD_QUEUES": bench.queue,
        "LEASEHOLD_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(target.root),
    }
    started = time.perf_counter()
    child = subprocess.Popen(target.command(), cwd=target.root, env=env, stdout=subprocess.DEVNULL)
    claimed_at = None
    try:
        while time.perf_counter() - started < TIMEOUT_S:
            pipe = poller.pipeline(transaction=False)
            pipe.get(keys.queued)  # runs in the queue's lanes (the scripts keep the count)
            pipe.llen(keys.ready)  # the queued ids themselves, before lanes (an older ROOT)
            pipe.zcard(keys.delayed)
            pipe.zcard(keys.leases)
            queued, listed, delayed, leased = pipe.execute()
            ready = listed if queued is None else int(queued)
            now = time.perf_counter()
            if claimed_at is None and ready < QUEUED:
                claimed_at = now
                target.claim_cpu_ms.append(cpu_ms(child.pid))
            if ready + delayed + leased < QUEUED:
                target.cpu_ms.append(cpu_ms(child.pid))
                target.claim_ms.append(((claimed_at or now) - started) * 1000)
                target.done_ms.append((now - started) * 1000)
                return
            if child.poll() is not None:
                raise RuntimeError(f"worker exited with status {child.returncode}")
            time.sleep(POLL_S)
        raise RuntimeError(f"no run finished within {TIMEOUT_S} s")
    finally:
        child.terminate()
        child.wait(timeout=30)
        poller.close()


SEED = """
import asyncio, sys
from app.settings import Settings
from app.store.redis.connection import async_client
from app.store.runs.store import NewRun, RunStore
from app.store.lua.scripts import Scripts

async def seed(url, n):
    settings = Settings(redis_url=url)
    client = async_client(url)
    store = RunStore.for_settings(client, Scripts.for_settings(settings), settings)
    for _ in range(n):
        await store.create(NewRun(handler="demo.echo", input={}))
    await client.aclose()

asyncio.run(seed(sys.argv[1], int(sys.argv[2])))
"""


async def queue_runs(bench: harness.Bench, target: Target) -> None:
    """An empty server with ``QUEUED`` runs waiting, created by the target's own store.

    Its own: the queued-run layout is the store's, and it changes between versions.
    """
    await bench.reset()
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    env["PYTHONPATH"] = str(target.root)
    await asyncio.to_thread(
        subprocess.run,
        [str(target.python), "-c", SEED, bench.url, str(QUEUED)],
        cwd=target.root,
        env=env,
        check=True,
        timeout=TIMEOUT_S,
    )


# `leasehold worker` as the console script runs it, ended at its first claim (--callgrind)
CLAIM_PROBE = """
import os, sys
from app.startup import quiet_collector
quiet_collector()
from app.imports import import_redis
import_redis()
from app.store.leases.store import LeaseStore

async def first_claim(self, *args, **kwargs):
    sys.stdout.write(f"claim: {len(sys.modules)} modules\\n")
    sys.stdout.flush()
    os._exit(0)

LeaseStore.finish_and_claim = first_claim
sys.argv = ["leasehold", "worker", "--concurrency", "50"]
try:
    from app.cli.launch import main
except ImportError:  # a checkout from before app/cli/
    from app.launch import main
main()
"""


async def instructions(targets: list[Target]) -> dict[str, Any]:
    """Each target's instructions from exec to its first claim, under callgrind."""
    from app.settings import Settings
    from app.store.lua.scripts import Scripts
    from app.store.runs.store import RunStore

    async with harness.private_redis("startup") as server:
        settings = Settings(redis_url=server.url)
        store = RunStore.for_settings(server.client, Scripts.for_settings(settings), settings)
        bench = harness.Bench(server.url, server.client, store)
        result = await harness.header(server.client, "worker_startup_instructions")
        result["targets"] = []
        for target in targets:
            await queue_runs(bench, target)
            env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
            env |= {
                "LEASEHOLD_REDIS_URL": server.url,
                "LEASEHOLD_HANDLERS": "app.demo",
                "LEASEHOLD_QUEUES": bench.queue,
                "LEASEHOLD_LOG_LEVEL": "WARNING",
                "PYTHONPATH": str(target.root),
            }
            done = await asyncio.to_thread(
                subprocess.run,
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--callgrind-out-file=/dev/null",
                    str(target.python),
                    "-c",
                    CLAIM_PROBE,
                ],
                cwd=target.root,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            counted = [line for line in done.stderr.splitlines() if "Collected" in line]
            if done.returncode != 0 or not counted or "claim:" not in done.stdout:
                raise RuntimeError(f"{target.root}: no first claim under callgrind: {done.stderr}")
            result["targets"].append(
                {
                    "python": str(target.python),
                    "root": str(target.root),
                    "instructions": int(counted[-1].split()[-1]),
                    "modules": done.stdout.strip(),
                }
            )
        return result


def summary(values: list[float]) -> str:
    """min / median / max, in ms."""
    return f"min {min(values):4.0f} median {statistics.median(values):4.0f} max {max(values):4.0f}"


async def measure(targets: list[Target], reps: int) -> dict[str, Any]:
    """Every target ``reps`` times, interleaved; one warm-up start each first."""
    from app.settings import Settings
    from app.store.lua.scripts import Scripts
    from app.store.runs.store import RunStore

    async with harness.private_redis("startup") as server:
        settings = Settings(redis_url=server.url)
        store = RunStore.for_settings(server.client, Scripts.for_settings(settings), settings)
        bench = harness.Bench(server.url, server.client, store)
        result = await harness.header(server.client, "worker_startup")
        for rep in range(reps + 1):
            for target in targets:
                await queue_runs(bench, target)
                await asyncio.to_thread(one_start, target, server.url, bench)
                if rep == 0:  # warm-up: page cache; not counted
                    for values in (
                        target.claim_ms,
                        target.done_ms,
                        target.cpu_ms,
                        target.claim_cpu_ms,
                    ):
                        values.clear()
        result["load_at_end"] = harness.load_average()
        result["targets"] = [
            {
                "python": str(t.python),
                "root": str(t.root),
                "first_claim_ms": t.claim_ms,
                "first_done_ms": t.done_ms,
                "cpu_ms_at_first_done": t.cpu_ms,
                "cpu_ms_at_first_claim": t.claim_cpu_ms,
            }
            for t in targets
        ]
        return result


def main() -> None:
    """Print, per target, spawn → first claim, → first finished run, and CPU by then."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--target",
        action="append",
        type=Target.parse,
        help="PYTHON:ROOT (repeatable; default: this interpreter and checkout)",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions from exec to the first claim, once per target (valgrind)",
    )
    options = parser.parse_args()
    targets: list[Target] = options.target or [Target.parse(":")]
    for target in targets:
        compileall.compile_dir(target.root / "app", quiet=1)
    if options.callgrind:
        counted = asyncio.run(instructions(targets))
        harness.record(counted)
        for entry in counted["targets"]:
            print(f"{entry['root']}: {entry['instructions']:,} instructions ({entry['modules']})")
        return
    result = asyncio.run(measure(targets, options.reps))
    harness.record(result)
    print(f"load average at start {result['load_at_start']}, at end {result['load_at_end']}")
    for target in targets:
        print(f"{target.root} ({target.python}), n={options.reps}:")
        print(f"  spawn -> first claim     {summary(target.claim_ms)} ms")
        print(f"  spawn -> first finished  {summary(target.done_ms)} ms")
        print(f"  worker CPU by then       {summary(target.cpu_ms)} ms")
        print(f"  worker CPU by 1st claim  {summary(target.claim_cpu_ms)} ms")


if __name__ == "__main__":
    main()
