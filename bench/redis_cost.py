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

    cd <checkout> && PYTHONPATH=. .venv/bin/python <this checkout>/bench/redis_cost.py 20000

``--callgrind`` runs redis-server under valgrind's callgrind with instrumentation on
for the drain only, and adds the server's instructions per run (exact whatever the
machine's load; ~50x slower, so use n of ~2,000) and the profile's file to the line.
``--renew`` measures the heartbeat's ``renew_leases`` instead (n runs claimed, every
lease renewed twice, per renewal). ``--server-arg NAME VALUE`` passes a config to the server (e.g.
``--server-arg hash-max-listpack-entries 16``: a run record as a hashtable).

    .venv/bin/python bench/redis_cost.py 2000 --callgrind /tmp/cg.out
    callgrind_annotate /tmp/cg.out | head -40          # where the instructions went
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from app.settings import Settings
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

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


def command_delta(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]
) -> tuple[dict[str, tuple[int, float]], int]:
    """Calls and usec per command between two snapshots, and the commands (scripts not counted)."""
    delta = {
        name: (count - before.get(name, (0, 0.0))[0], usec - before.get(name, (0, 0.0))[1])
        for name, (count, usec) in after.items()
        if name != "info"
    }
    commands = sum(count for name, (count, _) in delta.items() if name not in ("evalsha", "eval"))
    return delta, commands


def where(n: int, batch: int) -> dict[str, Any]:
    """What every result line starts with: the tree measured, its size and the load."""
    return {"tree": os.getcwd(), "n": n, "load": round(os.getloadavg()[0], 2), "batch": batch}


async def with_queued_runs(url: str, n: int) -> tuple[Any, Scripts, LeaseStore]:
    """A client, the scripts and a lease store on ``url``, after ``n`` demo.echo creates."""
    settings = Settings(redis_url=url)
    client = async_client(url)
    scripts = Scripts.for_settings(settings)
    runs = RunStore.for_settings(client, scripts, settings)
    for _ in range(n):
        await runs.create(NewRun(handler="demo.echo", input={}))
    return client, scripts, LeaseStore.for_settings(client, scripts, settings)


async def drain_cost(
    url: str, n: int, instrument: Callable[[bool], None] = lambda on: None, batch: int = BATCH
) -> dict[str, Any]:
    """Create ``n`` runs, drain them, and return the drain's Redis cost per run.

    ``instrument(True)`` is called right before the drain and ``instrument(False)``
    right after it, so a profiler sees the drain and not the creates.
    """
    client, scripts, leases = await with_queued_runs(url, n)
    await scripts.load_all(client)  # cached before the drain: no compile inside it
    calls_before, cpu_before = await snapshot(client)
    instrument(True)
    claimed = (await leases.claim("default", "w-1", batch)).runs
    done = 0
    while claimed:
        outcomes = [succeeded(run) for run in claimed]
        _, more = await leases.finish_and_claim("default", "w-1", outcomes, batch)
        done += len(claimed)
        claimed = more.runs
    instrument(False)
    calls_after, cpu_after = await snapshot(client)
    await client.aclose()
    delta, commands = command_delta(calls_before, calls_after)
    scripts_called, script_usec = delta.get("evalsha", (0, 0.0))
    return {
        **where(n, batch),
        "done": done,
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


async def renew_cost(
    url: str, n: int, instrument: Callable[[bool], None] = lambda on: None, batch: int = BATCH
) -> dict[str, Any]:
    """Create and claim ``n`` runs, then renew every lease twice; the renewals' cost.

    The heartbeat's path (``LeaseRenewer.renew``, one ``renew_leases`` call per queue),
    in calls of ``batch`` leases. The first round is each run's first renewal (the one
    that adds ``last_renewed_at`` to the record), the second a later one; both are
    instrumented, so a per-renewal figure is their mean.
    """
    from app.store.leases.store import LeaseRenewer
    from app.store.redis.connection import sync_client

    client, scripts, leases = await with_queued_runs(url, n)
    held = []
    claimed = (await leases.claim("default", "w-1", batch)).runs
    while claimed:
        held += [run.lease for run in claimed]
        claimed = (await leases.claim("default", "w-1", batch)).runs
    await scripts.load_all(client)
    renewer = LeaseRenewer(
        sync_client(url), scripts=scripts, prefix=leases.prefix, lease_ttl_ms=leases.lease_ttl_ms
    )
    rounds = [held[first : first + batch] for first in range(0, len(held), batch)] * 2
    stats = await snapshot(client)
    instrument(True)
    for leases_of_call in rounds:
        renewer.renew(leases_of_call)
    instrument(False)
    script_usec = (await snapshot(client))[0]["evalsha"][1] - stats[0]["evalsha"][1]
    cpu_s = (await snapshot(client))[1] - stats[1]
    await client.aclose()
    renewals = 2 * len(held)
    return {
        **where(n, batch),
        "renewals": renewals,
        "script_wall_us_per_renewal": round(script_usec / renewals, 2),
        "redis_cpu_us_per_renewal": round(cpu_s / renewals * 1e6, 2),
    }


def callgrind_total(out_file: str) -> int:
    """The instructions callgrind counted (its ``totals:`` line: event ``Ir``)."""
    with open(out_file) as profile:
        for line in profile:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise ValueError(f"{out_file} has no totals line")


@contextlib.contextmanager
def profiled_server(
    callgrind: str | None, server_args: list[tuple[str, str]], port: int = 0
) -> Iterator[tuple[str, Callable[[bool], None]]]:
    """A throwaway redis-server (under callgrind when ``callgrind`` names its profile):
    its URL, and ``instrument(on)`` that turns callgrind's counting on and off."""
    port = port or free_port()
    command = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    for name, value in server_args:
        command += [f"--{name}", value]
    if callgrind:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={os.path.abspath(callgrind)}",
            *command,
        ]
    with tempfile.TemporaryDirectory() as data_dir:
        server = subprocess.Popen(
            command, cwd=data_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def instrument(on: bool) -> None:
            if callgrind:
                state = "on" if on else "off"
                subprocess.run(
                    ["callgrind_control", "-i", state, str(server.pid)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )

        try:
            for _ in range(1200):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0", instrument
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    """Run one measurement on a throwaway redis-server and print it as one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=20_000)
    parser.add_argument("--callgrind", metavar="OUT", help="profile the drain into OUT")
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="runs per claim (1: an idle worker's)"
    )
    parser.add_argument(
        "--server-arg", nargs=2, action="append", default=[], metavar=("NAME", "VALUE")
    )
    parser.add_argument(
        "--renew", action="store_true", help="the heartbeat's renewals instead of the drain"
    )
    parser.add_argument("--port", type=int, default=0, help="the server's port (0: any free one)")
    args = parser.parse_args()
    with profiled_server(args.callgrind, args.server_arg, args.port) as (url, instrument):
        measure = renew_cost if args.renew else drain_cost
        result = asyncio.run(measure(url, args.n, instrument, args.batch))
    if args.callgrind:
        per, count = ("renewal", result["renewals"]) if args.renew else ("run", args.n)
        result[f"instructions_per_{per}"] = round(callgrind_total(args.callgrind) / count)
        result["profile"] = args.callgrind
    if args.server_arg:
        result["server_args"] = args.server_arg
    print(json.dumps(result))


if __name__ == "__main__":
    main()
