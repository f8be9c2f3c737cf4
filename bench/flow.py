"""Throughput under flow control (issue 15): runs spread over many concurrency keys.

The throughput benchmark's method (:mod:`bench.throughput`: N no-op ``demo.echo``
runs created first, then one ``leasehold worker --concurrency 50`` timed until all are
terminal), with every run naming one of ``--keys`` concurrency keys round-robin and
the queue limiting each key to ``--key-limit`` running runs. With 1,000 keys at
limit 1 a claim visits a lane per run and blocks each served key until its run ends:
the figure and the claim round trips per run show what fairness and limits cost.

    .venv/bin/python -m bench.flow --keys 1000 --key-limit 1 --n 5000 --reps 3
    .venv/bin/python -m bench.flow --keys 0 --n 5000 --reps 3     # no key: the plain path
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from app.models.read import QueueLimits
from app.settings import Settings
from app.store.flow.store import FlowStore
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import Bench, log
from bench.throughput import Producer, summarize, throughput_rep


def keyed_producer(bench: Bench, keys: int, key_limit: int) -> Producer:
    """Declare the key limit (the rep's reset emptied Redis), then create runs over ``keys``."""
    flow = FlowStore(
        bench.client, scripts=bench.store.scripts, prefix=bench.store.prefix, events_maxlen=10_000
    )

    async def produce(n: int) -> list[str]:
        if keys:
            await flow.set_limits(bench.queue, QueueLimits(default_key=key_limit))
        ids = []
        for i in range(n):
            key = f"tenant-{i % keys}" if keys else None
            created = await bench.store.create(
                NewRun(handler="demo.echo", input={}, concurrency_key=key)
            )
            ids.append(created.run.id)
        return ids

    return produce


async def main(argv: list[str] | None = None) -> None:
    """Measure ``--reps`` repetitions, print the medians, append the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__)
    parser.add_argument("--keys", type=int, default=1000, help="concurrency keys (0: none)")
    parser.add_argument("--key-limit", type=int, default=1)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    async with harness.private_redis("bench-flow") as redis_server:
        settings = Settings(redis_url=redis_server.url)
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        result: dict[str, Any] = await harness.header(redis_server.client, args.label)
        produce = keyed_producer(bench, args.keys, args.key_limit)
        reps = [
            await throughput_rep(bench, produce, n=args.n, tag=f"flow-{args.keys}k-{rep}")
            for rep in range(args.reps)
        ]
        mode = f"store, {args.keys} keys at limit {args.key_limit}" if args.keys else "store"
        result["flow"] = summarize(mode, args.n, reps)
    path = harness.record(result)
    summary = {k: v for k, v in result["flow"].items() if k != "reps"}
    log(f"{summary}")
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
