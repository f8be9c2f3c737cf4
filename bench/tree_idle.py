"""What idle tree streams cost Redis, and what happens to the streams past the caps (issue 35).

``python -m bench.tree_idle [--children 50] [--streams 20 150]`` builds one idle tree
on the benchmark's own redis-server: a ``bench.fan`` parent spawns ``--children``
``demo.echo`` children on a queue no worker serves and joins them (parked), so
nothing in the tree moves. One ``leasehold api`` then serves each ``--streams`` N
tree streams (``GET /runs/{id}/events?include=children``) of that tree from one
client, and the Redis commands per second (``INFO commandstats``, the benchmark's
own INFO calls left out) are read over ``--window-s``, less what the idle stack
(API, parent's worker) costs with no stream at all. Reported per N: streams
answered 200 and refused 503, streams that ended before their tree did (a
traceback or a dropped response mid-stream), commands/s in all and per stream.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx

from app.models import RunStatus
from app.settings import Settings
from app.stack.embedded import free_port
from app.stack.processes import wait_healthy
from app.store.lua.scripts import Scripts
from app.store.queues.store import QueueStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import Bench, log

KIDS = "kids"
POLL_S = 0.05


async def until(what: str, check: Any, timeout_s: float = 120.0) -> None:
    """Poll ``check()`` until it is true; raise past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s}s")
        await asyncio.sleep(POLL_S)


class Stream:
    """One tree stream held open: its status, and whether it ended before being closed."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.ended_early = False
        self.opened = asyncio.Event()

    async def follow(self, http: httpx.AsyncClient, run_id: str) -> None:
        """Open the stream and read it until cancelled; note how it ended otherwise."""
        try:
            async with http.stream(
                "GET", f"/runs/{run_id}/events", params={"include": "children"}
            ) as response:
                self.status = response.status_code
                self.opened.set()
                if response.status_code != 200:
                    await response.aread()
                    return
                async for _ in response.aiter_raw():
                    pass
                self.ended_early = True  # the tree never ends here: the API gave up
        except (httpx.HTTPError, OSError):
            self.ended_early = self.status == 200
            self.opened.set()


async def idle_tree(bench: Bench, children: int) -> str:
    """A parked ``bench.fan`` parent and its ``children`` queued children; the parent's id."""
    parent = (await bench.store.create(NewRun(handler="bench.fan", input={"n": children}))).run.id
    await until(
        "the parent to park",
        lambda: _status_is(bench.store, parent, RunStatus.WAITING),
    )
    return parent


async def _status_is(store: RunStore, run_id: str, status: RunStatus) -> bool:
    return (await store.get(run_id)).status == status


async def commands_per_s(bench: Bench, window_s: float) -> float:
    """Commands Redis executed per second over ``window_s``, the benchmark's INFO left out."""
    before = await harness.counters(bench.client)
    await asyncio.sleep(window_s)
    return (await harness.counters(bench.client)).minus(before).total / window_s


async def measure(bench: Bench, url: str, parent: str, n: int, window_s: float) -> dict[str, Any]:
    """Open ``n`` streams of the tree, let them go idle, read commands/s; close them."""
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        streams = [Stream() for _ in range(n)]
        tasks = [asyncio.create_task(s.follow(http, parent)) for s in streams]
        await asyncio.gather(*(s.opened.wait() for s in streams))
        await asyncio.sleep(5.0)  # past the streams' poll backoff: idle for good
        rate = await commands_per_s(bench, window_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    served = sum(s.status == 200 for s in streams)
    return {
        "streams": n,
        "served": served,
        "refused_503": sum(s.status == 503 for s in streams),
        "other": sum(s.status not in (200, 503) for s in streams),
        "ended_mid_stream": sum(s.ended_early for s in streams),
        "commands_per_s": round(rate, 1),
    }


async def main(argv: list[str] | None = None) -> None:
    """Measure each ``--streams`` count on one idle tree and append the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m bench.tree_idle", description=__doc__)
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--streams", type=int, nargs="+", default=[20, 150])
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    async with harness.private_redis("bench-tree-idle") as redis_server:
        settings = Settings(redis_url=redis_server.url)
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        await QueueStore.for_settings(bench.client, Scripts(), settings).keep_declared(
            ["default", KIDS]
        )
        env = bench.env(LEASEHOLD_QUEUES=f"default,{KIDS}")
        result: dict[str, Any] = await harness.header(bench.client, args.label)
        port = free_port()
        with (
            harness.running("tree-parent", ["worker", "--queues", "default"], env),
            harness.running("tree-api", ["api", "--port", str(port)], env) as api,
        ):
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, api, timeout_s=60)
            parent = await idle_tree(bench, args.children)
            baseline = await commands_per_s(bench, args.window_s)
            runs: list[dict[str, Any]] = []
            for n in args.streams:
                run = await measure(bench, url, parent, n, args.window_s)
                run["commands_per_s"] = round(run["commands_per_s"] - baseline, 1)
                run["per_stream"] = round(run["commands_per_s"] / max(run["served"], 1), 1)
                log(f"{n} streams: {run}")
                runs.append(run)
        result["tree_idle"] = {
            "children": args.children,
            "baseline_commands_per_s": round(baseline, 1),
            "runs": runs,
        }
    path = harness.record(result)
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
