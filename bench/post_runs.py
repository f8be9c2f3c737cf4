"""Sequential ``POST /runs`` through the in-process API (ASGI, httpx): wall time per request.

``python -m bench.post_runs [--n 2000] [--port 0] [--label L]``: a private redis-server, the
app with its lifespan run, 200 warm-up creates, then ``--n`` creates one at a time; prints
p50 / p90 / min µs per request and the process's CPU per request (all threads). No worker:
the runs stay queued. Used for the API's own share of a single create (BENCHMARKS.md,
"aim 5 (handoff)"); wall figures move with the load, the min much less.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from app.api.app import create_app
from app.settings import Settings
from bench import harness

WARMUP = 200
BODY = {"handler": "demo.echo", "input": {"n": 1}}


async def measure(port: int, n: int) -> tuple[list[float], float]:
    """Per-request wall times (µs, sorted) and the process CPU per request (µs)."""
    async with harness.private_redis("post-runs", port) as server:
        app = create_app(Settings(redis_url=server.url, handlers=["app.demo"]))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                for _ in range(WARMUP):
                    answer = await c.post("/runs", json=BODY)
                    if answer.status_code != 201:
                        raise RuntimeError(answer.text)
                walls = []
                cpu0 = time.process_time()
                for _ in range(n):
                    started = time.perf_counter()
                    await c.post("/runs", json=BODY)
                    walls.append((time.perf_counter() - started) * 1e6)
                cpu = (time.process_time() - cpu0) / n * 1e6
    return sorted(walls), cpu


def main() -> None:
    """Measure once and print one line."""
    parser = argparse.ArgumentParser(prog="python -m bench.post_runs", description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--port", type=int, default=0, help="its redis-server's port (0: free)")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    load = harness.load_average()
    walls, cpu = asyncio.run(measure(args.port, args.n))
    print(
        f"{args.label} load {load[0]:.2f}: POST /runs p50 {walls[len(walls) // 2]:.0f} µs, "
        f"p90 {walls[int(len(walls) * 0.9)]:.0f} µs, min {walls[0]:.0f} µs; "
        f"process CPU {cpu:.0f} µs/request"
    )


if __name__ == "__main__":
    main()
