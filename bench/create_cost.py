"""Redis work per run of a batch create (``create_runs`` chunks), without an API process.

Creates N ``demo.echo`` runs on a private redis-server through
``RunStore.create_many`` in batches of ``--batch`` (each run with its own
idempotency key, as ``bench.bulk_create`` sends them) and reports, over the
creates only: commands per run (inside scripts included), Redis CPU per run and
the scripts' wall time per run. ``--callgrind OUT`` runs the server under
valgrind's callgrind with instrumentation on for the creates only and adds the
server's instructions per run: exact whatever the machine's load (the server's slow
log is off, or commands slowed past its mark by a busy machine would be logged, at
a cost), so an A/B of two checkouts compares their Lua (~50x slower: use n of ~5,000)::

    cd <checkout> && PYTHONPATH=. .venv/bin/python <this checkout>/bench/create_cost.py 5000 \
        --callgrind /tmp/cg-create.out
    callgrind_annotate /tmp/cg-create.out | head -40    # where the instructions went
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench.redis_cost import callgrind_total, command_delta, profiled_server, snapshot


async def create_cost(url: str, n: int, batch: int, instrument: Any) -> dict[str, Any]:
    """Create ``n`` runs in batches of ``batch``; the creates' Redis cost per run."""
    settings = Settings(redis_url=url)
    client = async_client(url)
    scripts = Scripts.for_settings(settings)
    runs = RunStore.for_settings(client, scripts, settings)
    await scripts.load_all(client)
    tag = time.time_ns()
    news = [
        NewRun(handler="demo.echo", input={"message": f"run {i}"}, idempotency_key=f"{tag}-{i}")
        for i in range(n)
    ]
    await runs.create_many(news[:1])  # the first create of a queue declares nothing here
    calls_before, cpu_before = await snapshot(client)
    instrument(True)
    for start in range(1, n, batch):
        outcomes = await runs.create_many(news[start : start + batch])
        bad = [o for o in outcomes if isinstance(o, Exception) or o.replayed]
        if bad:
            raise RuntimeError(f"not created: {bad[:3]}")
    instrument(False)
    calls_after, cpu_after = await snapshot(client)
    await client.aclose()
    made = n - 1
    delta, commands = command_delta(calls_before, calls_after)
    return {
        "tree": os.getcwd(),
        "n": made,
        "batch": batch,
        "load": round(os.getloadavg()[0], 2),
        "commands_per_run": round(commands / made, 2),
        "script_wall_us_per_run": round(delta.get("evalsha", (0, 0.0))[1] / made, 1),
        "redis_cpu_us_per_run": round((cpu_after - cpu_before) / made * 1e6, 1),
        "per_command": {
            name: round(count / made, 2)
            for name, (count, _) in sorted(delta.items(), key=lambda item: -item[1][0])
            if count and name not in ("evalsha", "eval")
        },
    }


def main() -> None:
    """One measurement on a throwaway redis-server, printed as one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="runs per create_many")
    parser.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    parser.add_argument("--callgrind", metavar="OUT", help="profile the creates into OUT")
    args = parser.parse_args()
    # no slow log: under callgrind on a loaded machine some commands pass its 10 ms mark and
    # each logged one costs thousands of instructions, a count that would follow the load
    quiet = [("slowlog-log-slower-than", "-1")]
    with profiled_server(args.callgrind, quiet, args.port) as (url, instrument):
        result = asyncio.run(create_cost(url, args.n, args.batch, instrument))
    if args.callgrind:
        result["instructions_per_run"] = round(callgrind_total(args.callgrind) / result["n"])
        result["profile"] = args.callgrind
    print(json.dumps(result))


if __name__ == "__main__":
    main()
