"""How long a worker's first claim waits for its cancel channel's subscription.

``python -m bench.subscribe_wait [--reps 30] [--port 7431]`` starts a redis-server of
its own and, repeatedly, an in-process :class:`~app.executor.worker.Worker` (no
reconciler); it times the start-up's ``_connect`` (SCRIPT EXISTS + the queue SADD)
and then how long ``_subscribed`` waited for Redis's confirmation of the
SUBSCRIBE, which the worker sends while the scripts load. The second figure is
what subscribing before the first claim adds to spawn -> first claim.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import app.executor.worker as worker_module
from app.handlers import HandlerRegistry
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis


class Timings:
    """Wraps the worker's start-up steps and keeps their durations (ms)."""

    def __init__(self) -> None:
        self.connect_ms: list[float] = []
        self.subscribe_wait_ms: list[float] = []
        self.claiming = asyncio.Event()  # set when a start's couriers would claim
        self._connect = worker_module._connect
        self._subscribed = worker_module._subscribed

    def install(self) -> None:
        """Replace the module's two steps with timed ones."""

        async def connect(*args: Any) -> None:
            began = time.perf_counter()
            await self._connect(*args)
            self.connect_ms.append((time.perf_counter() - began) * 1000)

        async def subscribed(listener: Any) -> None:
            began = time.perf_counter()
            await self._subscribed(listener)
            self.subscribe_wait_ms.append((time.perf_counter() - began) * 1000)
            self.claiming.set()

        worker_module._connect = connect  # type: ignore[assignment]
        worker_module._subscribed = subscribed  # type: ignore[assignment]


async def one_start(url: str, timings: Timings) -> None:
    """Start a worker, wait until its couriers would claim, stop it."""
    settings = Settings(redis_url=url, prefix="subwait", reconciler_enabled=False)
    worker = worker_module.Worker(settings, HandlerRegistry())
    timings.claiming.clear()
    task = asyncio.create_task(worker.run())
    claiming = asyncio.create_task(timings.claiming.wait())
    await asyncio.wait([task, claiming], return_when=asyncio.FIRST_COMPLETED)
    claiming.cancel()
    worker.request_stop()
    worker.request_stop()
    await task


def summary(values: list[float]) -> str:
    return f"min {min(values):.3f} median {statistics.median(values):.3f} max {max(values):.3f}"


async def measure(reps: int, port: int) -> Timings:
    timings = Timings()
    timings.install()
    server = EmbeddedRedis(
        data_dir=Path(tempfile.mkdtemp()), port=port, appendonly=False, log_file=None
    )
    server.start()
    try:
        for _ in range(reps):
            await one_start(server.url, timings)
    finally:
        server.stop()
    return timings


def main() -> None:
    """Print both durations over ``--reps`` starts, and the load."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--port", type=int, default=7431)
    options = parser.parse_args()
    load = os.getloadavg()
    timings = asyncio.run(measure(options.reps, options.port))
    print(f"load average at start {load}, at end {os.getloadavg()}, n={options.reps}")
    print(f"  scripts + queue (_connect)      {summary(timings.connect_ms)} ms")
    print(f"  then waited for the subscription {summary(timings.subscribe_wait_ms)} ms")


if __name__ == "__main__":
    main()
