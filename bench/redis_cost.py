"""Redis work per run of claim + finish, without a worker process (issue 15's fast path).

Creates N ``demo.echo`` runs on a private redis-server, then drains them the way a
worker's courier does (claim 50; finish those 50 and claim 50 more in one round trip)
from this process. Over the drain only, from ``INFO commandstats`` and ``INFO cpu``:
commands per run (those inside scripts included), Redis CPU per run (``used_cpu`` user
+ sys), the scripts' wall time per run and the calls and usec per run of each command.
No worker, no polling: only Redis work is measured, so the figures change little with
the machine's load, and an A/B of two checkouts compares their Lua. It uses only
``app.store`` calls that exist since before flow control, so each checkout runs it
with its own venv::

    cd <checkout> && .venv/bin/python <this checkout>/bench/redis_cost.py 20000
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from app.settings import Settings
from app.store.connection import async_client
from app.store.leases import LeaseStore, Outcome
from app.store.runs import NewRun, RunStore
from app.store.scripts import Scripts

BATCH = 50  # the worker's --concurrency in bench.throughput


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def succeeded(run: Any) -> Outcome:
    """A succeeded outcome, in either checkout's shape (a Lease since 0fb2326)."""
    if "lease" in {field.name for field in dataclasses.fields(Outcome)}:
        from app.models import RunStatus

        return Outcome(run.lease, RunStatus("succeeded"))  # type: ignore[call-arg, arg-type, unused-ignore]
    return Outcome(run.id, run.fence, "succeeded")  # type: ignore[call-arg, arg-type, unused-ignore]


async def snapshot(client: Any) -> tuple[dict[str, tuple[int, float]], float]:
    """Calls and usec per command, and the server's CPU seconds."""
    stats = await client.info("commandstats")
    cpu = await client.info("cpu")
    calls = {
        name.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"]))
        for name, v in stats.items()
        if isinstance(v, dict)
    }
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def drain_cost(url: str, n: int) -> dict[str, Any]:
    """Create ``n`` runs, drain them, and return the drain's Redis cost per run."""
    settings = Settings(redis_url=url)
    client = async_client(url)
    scripts = Scripts.for_settings(settings)
    runs = RunStore.for_settings(client, scripts, settings)
    leases = LeaseStore.for_settings(client, scripts, settings)
    for _ in range(n):
        await runs.create(NewRun(handler="demo.echo", input={}))
    calls_before, cpu_before = await snapshot(client)
    claimed = (await leases.claim("default", "w-1", BATCH)).runs
    done = 0
    while claimed:
        outcomes = [succeeded(run) for run in claimed]
        _, more = await leases.finish_and_claim("default", "w-1", outcomes, BATCH)
        done += len(claimed)
        claimed = more.runs
    calls_after, cpu_after = await snapshot(client)
    await client.aclose()
    delta = {
        name: (
            count - calls_before.get(name, (0, 0.0))[0],
            usec - calls_before.get(name, (0, 0.0))[1],
        )
        for name, (count, usec) in calls_after.items()
        if name != "info"
    }
    commands = sum(count for name, (count, _) in delta.items() if name not in ("evalsha", "eval"))
    scripts_called, script_usec = delta.get("evalsha", (0, 0.0))
    return {
        "tree": os.getcwd(),
        "n": n,
        "done": done,
        "load": round(os.getloadavg()[0], 2),
        "commands_per_run": round(commands / n, 2),
        "scripts": scripts_called,
        "script_wall_us_per_run": round(script_usec / n, 1),
        "redis_cpu_us_per_run": round((cpu_after - cpu_before) / n * 1e6, 1),
        # where the commands go: calls and usec per run of each command, most calls first
        "per_command": {
            name: [round(count / n, 2), round(usec / n, 2)]
            for name, (count, usec) in sorted(delta.items(), key=lambda item: -item[1][0])
            if count and name not in ("evalsha", "eval")
        },
    }


def main() -> None:
    """Run one measurement on a throwaway redis-server and print it as one JSON line."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            cwd=data_dir,
            stdout=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            print(json.dumps(asyncio.run(drain_cost(f"redis://127.0.0.1:{port}/0", n))))
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
