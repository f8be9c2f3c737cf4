"""What one round trip costs a client whose calls arrive at an idle machine (issue 19 aim 5).

``python -m bench.cold_trip [--n 300] [--gaps-ms 0 20]`` times, on its own redis-server, a
PING and a ``RunStore.create`` through this checkout's client, one call at a time, the way
the peers' harness enqueues: each call is one ``run_until_complete`` of a private event loop,
``gap`` ms of ``time.sleep`` before it (50 runs/s is a 20 ms gap). Prints p50 / p90 µs per
gap, after the first 20 calls. Most of a cold PING is the client's Python, not Redis:
BENCHMARKS.md (seventh stop) has it before and after the pool's idle fast path. Run it from
the checkout to measure; ``PYTHONPATH=OTHER_CHECKOUT`` measures another tree's client.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness

WARMUP_CALLS = 20


def _timed(
    loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[object]], n: int, gap_s: float
) -> list[float]:
    """µs of each of ``n`` calls, each alone on the loop after ``gap_s`` of sleep."""
    took = []
    for _ in range(n):
        time.sleep(gap_s)
        started = time.perf_counter()
        loop.run_until_complete(call())
        took.append((time.perf_counter() - started) * 1e6)
    return took[WARMUP_CALLS:]


def _figures(label: str, gap_ms: float, took: list[float]) -> str:
    p90 = sorted(took)[int(len(took) * 0.9)]
    return f"gap {gap_ms:g} ms  {label:<7} p50 {statistics.median(took):6.1f} µs  p90 {p90:6.1f} µs"


def main() -> None:
    """Parse the arguments, start a redis-server, time each gap in turn."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--gaps-ms", type=float, nargs="+", default=[0, 20])
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    server_context = harness.private_redis("cold-trip")
    server = loop.run_until_complete(server_context.__aenter__())
    try:
        client = server.client
        runs = RunStore.for_settings(client, Scripts(), Settings(redis_url=server.url))

        def create() -> Awaitable[object]:
            return runs.create(NewRun(handler="bench.lat", input={"ts": time.time()}))

        for gap_ms in args.gaps_ms:
            for label, call in (("ping", client.ping), ("create", create)):
                took = _timed(loop, call, args.n + WARMUP_CALLS, gap_ms / 1000)
                print(_figures(label, gap_ms, took), flush=True)
            loop.run_until_complete(client.flushall())
        print(f"load {harness.load_average()[0]:.2f}")
    finally:
        loop.run_until_complete(server_context.__aexit__(None, None, None))
        loop.close()


if __name__ == "__main__":
    main()
