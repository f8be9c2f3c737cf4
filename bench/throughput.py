"""``make bench``: Leasehold's throughput, latency and heartbeat cost, by the peers' method.

Method (the same as ``/work/shared/bench-peers/bench.py``, one worker process):

* **throughput**: N no-op ``demo.echo`` runs are created first, one call per run,
  by one producer (through ``RunStore.create``, or over HTTP against a real
  ``leasehold api``); then ONE ``leasehold worker --concurrency 50`` subprocess is
  spawned and timed from spawn until every run is terminal (so start-up is
  included), polling every 20 ms. Median of ``--reps`` repetitions.
* **latency**: enqueue→start at a steady 50 runs/s against a warm idle worker; the
  producer stamps the time right before ``create``, the handler as its first
  statement (:mod:`bench.handlers`).
* **Redis cost**: ``INFO commandstats`` deltas over the worker's run (script calls
  and every command, including those inside scripts) and ``total_reads_processed``
  as round trips (one read event per batch of requests a client sends), both
  minus the benchmark's own polling.
* **heartbeat**: :mod:`bench.heartbeat` holds 5,000 sleeping runs in one worker.

Everything runs against the benchmark's own redis-server on a free loopback port
(``--save "" --appendonly no``, like the peers'). Results are printed as a table
and appended as one JSON line to ``bench/out/results.jsonl``.

    .venv/bin/python -m bench.throughput                 # everything, ~10 min
    .venv/bin/python -m bench.throughput --n 5000 --reps 1 --skip latency heartbeat
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx

from app.settings import Settings
from app.stack.embedded import free_port
from app.stack.processes import Child, wait_healthy
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import COUNTER_READS, Bench, RedisCounters, log
from bench.heartbeat import heartbeat_cost
from bench.latency import latency
from bench.report import print_report

POLL_S = 0.02  # the peers' progress poll interval
DEADLINE_S = 600.0
WORKER_CONCURRENCY = 50
POLL_COMMANDS = {"get": 1, "zcard": 2}  # what one Bench.unfinished() call sends

Producer = Callable[[int], Awaitable[list[str]]]


def store_producer(bench: Bench) -> Producer:
    """Create runs one ``RunStore.create`` call at a time."""

    async def produce(n: int) -> list[str]:
        ids = []
        for _ in range(n):
            created = await bench.store.create(NewRun(handler="demo.echo", input={}))
            ids.append(created.run.id)
        return ids

    return produce


def http_producer(api: httpx.AsyncClient) -> Producer:
    """Create runs one ``POST /runs`` at a time."""

    async def produce(n: int) -> list[str]:
        ids = []
        for _ in range(n):
            response = await api.post("/runs", json={"handler": "demo.echo", "input": {}})
            response.raise_for_status()
            ids.append(response.json()["id"])
        return ids

    return produce


async def wait_until_done(bench: Bench, n: int, worker: Child, t0: float) -> dict[str, Any]:
    """Poll until no run is left; returns when the first and the last completion were seen."""
    first: tuple[float, int] | None = None
    polls = 0
    done = 0
    while time.perf_counter() - t0 < DEADLINE_S:
        done = n - await bench.unfinished()
        polls += 1
        now = time.perf_counter()
        if done > 0 and first is None:
            first = (now, done)
        if done >= n:
            break
        if not worker.alive():
            raise RuntimeError(f"worker exited with {worker.returncode}")
        await asyncio.sleep(POLL_S)
    return {"t1": time.perf_counter(), "first": first, "done": done, "polls": polls}


def redis_cost(delta: RedisCounters, n: int, polls: int) -> dict[str, Any]:
    """Per-run Redis cost of the worker's phase, without the benchmark's own calls."""
    calls = dict(delta.calls)
    for name, per_poll in POLL_COMMANDS.items():
        calls[name] = calls.get(name, 0) - per_poll * polls
    worker = RedisCounters({k: v for k, v in calls.items() if v}, delta.reads, delta.writes)
    round_trips = delta.reads - polls - COUNTER_READS
    return {
        "redis_cpu_us_per_run": round(delta.cpu_s / n * 1e6, 1),
        "scripts_per_run": round(worker.scripts / n, 3),
        "commands_per_run": round(worker.total / n, 2),
        "round_trips_per_run": round(round_trips / n, 3),
        "reply_writes_per_run": round((delta.writes - polls - COUNTER_READS) / n, 3),
        "calls": worker.calls,
    }


async def throughput_rep(bench: Bench, produce: Producer, *, n: int, tag: str) -> dict[str, Any]:
    """One repetition: create ``n`` runs, then time one fresh worker until all are terminal."""
    await bench.reset()
    load = harness.load_average()
    t_e0 = time.perf_counter()
    ids = await produce(n)
    t_e1 = time.perf_counter()
    log(f"{tag}: created {n} in {t_e1 - t_e0:.2f}s; starting the worker (load {load[0]:.2f})")
    before = await harness.counters(bench.client)
    cpu_before = harness.children_cpu_s()
    t0 = time.perf_counter()
    args = ["worker", "--concurrency", str(WORKER_CONCURRENCY)]
    with harness.running(f"worker-{tag}", args, bench.env()) as worker:
        seen = await wait_until_done(bench, n, worker, t0)
        delta = (await harness.counters(bench.client)).minus(before)
    worker_cpu_s = harness.children_cpu_s() - cpu_before  # start-up and drain included
    elapsed = seen["t1"] - t0
    first = seen["first"]
    rep = {
        "elapsed_s": round(elapsed, 3),
        "runs_per_s": round(n / elapsed, 1) if seen["done"] >= n else None,
        "done": seen["done"],
        "t_first_progress_s": round(first[0] - t0, 3) if first else None,
        "steady_runs_per_s": _steady(n, first, seen["t1"]),
        "enqueue_runs_per_s": round(n / (t_e1 - t_e0), 1),
        "load_before": load,
        "worker_cpu_s": round(worker_cpu_s, 3),
        "worker_cpu_us_per_run": round(worker_cpu_s / n * 1e6, 1),
        "verify": await bench.statuses(ids),
        **redis_cost(delta, n, seen["polls"]),
    }
    log(f"{tag}: {rep['runs_per_s']} runs/s, {rep['round_trips_per_run']} round trips/run")
    return rep


def _steady(n: int, first: tuple[float, int] | None, t1: float) -> float | None:
    if first is None or t1 <= first[0]:
        return None
    return round((n - first[1]) / (t1 - first[0]), 1)


def summarize(mode: str, n: int, reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range over repetitions, as the peers report them."""
    rates = [rep["runs_per_s"] for rep in reps if rep["runs_per_s"]]
    steady = [rep["steady_runs_per_s"] for rep in reps if rep["steady_runs_per_s"]]
    return {
        "mode": mode,
        "n": n,
        "median_runs_per_s": round(harness.median(rates), 1) if rates else None,
        "min_runs_per_s": min(rates, default=None),
        "max_runs_per_s": max(rates, default=None),
        "median_steady_runs_per_s": round(harness.median(steady), 1) if steady else None,
        "median_enqueue_runs_per_s": round(
            harness.median([rep["enqueue_runs_per_s"] for rep in reps]), 1
        ),
        "median_round_trips_per_run": harness.median([rep["round_trips_per_run"] for rep in reps]),
        "median_scripts_per_run": harness.median([rep["scripts_per_run"] for rep in reps]),
        "median_commands_per_run": harness.median([rep["commands_per_run"] for rep in reps]),
        "median_worker_cpu_us_per_run": harness.median(
            [rep["worker_cpu_us_per_run"] for rep in reps]
        ),
        "median_redis_cpu_us_per_run": harness.median(
            [rep["redis_cpu_us_per_run"] for rep in reps]
        ),
        "reps": reps,
    }


@contextlib.contextmanager
def api_server(bench: Bench) -> Iterator[str]:
    """A real ``leasehold api`` subprocess on a free port; yields its base URL."""
    port = free_port()
    with harness.running("api", ["api", "--port", str(port)], bench.env()) as api:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, api)
        yield base


async def throughput(bench: Bench, mode: str, sizes: list[int], reps: int) -> list[dict[str, Any]]:
    """Every size of one mode (``store`` or ``http``), ``reps`` times each."""
    async with _producer(bench, mode) as produce:
        results = []
        for n in sizes:
            runs = [
                await throughput_rep(bench, produce, n=n, tag=f"tp-{mode}-{n}-{rep}")
                for rep in range(reps)
            ]
            results.append(summarize(mode, n, runs))
        return results


@contextlib.asynccontextmanager
async def _producer(bench: Bench, mode: str) -> AsyncIterator[Producer]:
    if mode == "store":
        yield store_producer(bench)
        return
    with api_server(bench) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as api:
            yield http_producer(api)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults are what BENCHMARKS.md reports."""
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[5000, 20000], help="runs per rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--modes", nargs="*", default=["store", "http"], choices=["store", "http"])
    parser.add_argument("--skip", nargs="*", default=[], choices=["latency", "heartbeat"])
    parser.add_argument("--latency-rate", type=float, default=50.0, help="runs per second")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--heartbeat-runs", type=int, default=5000)
    parser.add_argument("--heartbeat-ttl-s", type=float, default=6.0)
    parser.add_argument("--heartbeat-periods", type=int, default=5)
    parser.add_argument("--label", default="", help="free text stored with the results")
    return parser.parse_args(argv)


async def run_all(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement asked for, in order: throughput, latency, heartbeat."""
    result: dict[str, Any] = {"throughput": []}
    for mode in args.modes:
        result["throughput"] += await throughput(bench, mode, args.n, args.reps)
    if "latency" not in args.skip:
        result["latency"] = await latency(
            bench, rate=args.latency_rate, seconds=args.latency_seconds
        )
    if "heartbeat" not in args.skip:
        result["heartbeat"] = await heartbeat_cost(
            bench,
            runs=args.heartbeat_runs,
            ttl_s=args.heartbeat_ttl_s,
            periods=args.heartbeat_periods,
        )
    return result


async def main(argv: list[str] | None = None) -> None:
    """Start a private redis-server, measure, print the table, append the JSON line."""
    args = parse_args(argv)
    async with harness.private_redis("bench") as redis_server:
        settings = Settings(redis_url=redis_server.url)  # the defaults a user gets
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        result = await harness.header(redis_server.client, args.label)
        result |= await run_all(bench, args)
    path = harness.record(result)
    print_report(result)
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
