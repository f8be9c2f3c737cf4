"""The worker's CPU per round trip (outcomes written + runs claimed), Redis left out.

What ``bench.profile_worker`` cannot isolate on a loaded 2-core machine: the courier's
``LeaseStore.finish_and_claim`` as one process sees it. N ``demo.echo`` runs are created on
a private redis-server, then drained from this process the way a courier does (finish the
runs the last trip claimed, claim ``--batch`` more, in one trip), and ``time.thread_time()``
around each trip gives this thread's CPU for it: packing the arguments, the socket write
and read, the reply decoded into ``ClaimedRun`` objects. Redis's own CPU is not in it.
The minimum is the figure to compare (load only adds to it); alternate two checkouts::

    cd <checkout> && .venv/bin/python <this checkout>/bench/trip_cost.py 10000 --port 7471

Each checkout runs its own ``app`` (its venv's editable install), so an A/B compares the
client path of the two trees on the same Redis build.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from app.models import RunStatus
from app.settings import Settings
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness

CREATE_CHUNK = 500
OWNER = "trip-cost"


async def measure(n: int, batch: int, port: int) -> list[float]:
    """CPU seconds of each trip of a drain of ``n`` runs, ``batch`` claimed per trip."""
    async with harness.private_redis("trip-cost", port) as redis_server:
        settings = Settings(redis_url=redis_server.url)
        scripts = Scripts()
        await scripts.load_all(redis_server.client)
        runs = RunStore.for_settings(redis_server.client, scripts, settings)
        leases = LeaseStore.for_settings(redis_server.client, scripts, settings)
        for start in range(0, n, CREATE_CHUNK):
            size = min(CREATE_CHUNK, n - start)
            await asyncio.gather(
                *(runs.create(NewRun(handler="demo.echo", input={})) for _ in range(size))
            )
        outcomes: list[Outcome] = []
        trips: list[float] = []
        while True:
            started = time.thread_time()
            _, claim = await leases.finish_and_claim("default", OWNER, outcomes, batch)
            trips.append(time.thread_time() - started)
            outcomes = [Outcome(r.lease, RunStatus.SUCCEEDED, output_json="{}") for r in claim.runs]
            if not outcomes:
                return trips


def main(argv: list[str] | None = None) -> None:
    """Drain, then print the CPU per trip (min, p10, median) and per run."""
    parser = argparse.ArgumentParser(prog="bench/trip_cost.py", description=__doc__)
    parser.add_argument("n", type=int, nargs="?", default=10000, help="runs to drain")
    parser.add_argument("--batch", type=int, default=25, help="runs claimed per trip")
    parser.add_argument("--port", type=int, default=0, help="the redis-server's port")
    args = parser.parse_args(argv)
    trips = asyncio.run(measure(args.n, args.batch, args.port))
    ordered = sorted(trips)
    median = statistics.median(ordered)
    print(
        f"trips {len(trips)}, load {harness.load_average()[0]:.2f}: CPU per trip min "
        f"{ordered[0] * 1e6:.0f} p10 {ordered[len(ordered) // 10] * 1e6:.0f} median "
        f"{median * 1e6:.0f} us; {sum(trips) / args.n * 1e6:.1f} us per run"
    )


if __name__ == "__main__":
    main()
