"""What the create script costs Redis when runs arrive at an idle machine (issue 19 aim 5).

``python -m bench.create_cold [--n 200] [--gaps-ms 0 1 5 20]`` creates ``n`` runs one at a
time on its own redis-server, each handed off: before every create a claim of 0 runs by a
worker id registers that worker for the hand-off (as an idle worker's claim does), so the
create runs the hand-off's claim too. No worker runs and nobody waits on the inbox: only the
scripts are timed. Between one create and the next registration the client sleeps ``gap``
ms; Redis' slow log (threshold 0) gives each script call's own time. p50 µs per gap, for the
create and the registering claim.

At 50 runs/s (a 20 ms gap) every create meets a machine that has idled since the last one;
this shows how much more the same instructions cost then than back to back.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from app.settings import Settings
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Scripts
from app.store.runs.bindings import CREATE_RUN
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness, slow_log

OWNER = "bench-create-cold"
HANDOFF_MS = 600_000


async def measure(server: harness.PrivateRedis, n: int, gap_s: float) -> dict[str, float]:
    """p50 µs of the create and of the claim over ``n`` creates ``gap_s`` apart."""
    client = server.client
    await client.flushall()
    settings = Settings(redis_url=server.url)
    scripts = Scripts()
    runs = RunStore.for_settings(client, scripts, settings)
    leases = LeaseStore.for_settings(client, scripts, settings)
    await leases.claim("default", OWNER, 0, handoff_ms=HANDOFF_MS)
    async with slow_log.every_command(client) as entries:
        for _ in range(n):
            new = NewRun(handler="bench.lat", input={"enqueued_at": time.time()})
            await CREATE_RUN.send(
                runs.scripts, runs.client, runs.keys(new.queue), runs.create_args(new)
            )
            if gap_s:
                await asyncio.sleep(gap_s)
            await leases.claim("default", OWNER, 0, handoff_ms=HANDOFF_MS)
    durations = slow_log.by_script(entries)
    return {
        name: statistics.median(durations[f"evalsha:{script}"])
        for name, script in (("create", "create_run"), ("claim", "claim_runs"))
    }


async def main_async(args: argparse.Namespace) -> None:
    """Each gap in turn on one redis-server, printed as it is measured."""
    async with harness.private_redis("create-cold") as server:
        for gap in args.gaps_ms:
            p50 = await measure(server, args.n, gap / 1000)
            figures = ", ".join(f"{name} p50 {us:.0f} µs" for name, us in p50.items())
            print(f"gap {gap:g} ms, load {harness.load_average()[0]:.2f}: {figures}")


def main() -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--gaps-ms", type=float, nargs="+", default=[0, 1, 5, 20])
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
