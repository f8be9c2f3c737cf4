"""``python -m bench.cluster``: throughput on Redis Cluster against one node, and what WAIT costs.

Method (the throughput benchmark's, :mod:`bench.throughput`, spread over queues):

* N no-op ``demo.echo`` runs are created first, round-robin over Q queues, one
  ``RunStore.create`` at a time; then ``--workers`` ``leasehold worker
  --concurrency 50`` processes serving every queue are spawned together and
  timed from spawn until every run is terminal (start-up included), polling
  every 20 ms. Median of ``--reps`` repetitions.
* Deployments, each started by this script on loopback and stopped after it:
  one redis-server (the single-node figure, with 1 and 4 queues, to tell the
  cluster's effect from the queues'), a 3-primary cluster (1, 2 and 4 queues;
  queue names chosen with CLUSTER KEYSLOT so they land on distinct primaries as
  far as three allow), and a 3-primary cluster with a replica each, with
  ``LEASEHOLD_REPLICA_ACKS`` 0 and 1.
* The cost of one acknowledged write: the latency of ``RunStore.create`` (a
  durable transition) done one at a time, median and p99, with and without
  ``REPLICA_ACKS=1`` on the replicated cluster.

Every node, worker and this script share the machine: on a 2-core box the
cluster's extra nodes compete with the workers for the same cores, so the
numbers say what the code costs, not what three real servers would give.
Results are printed and appended as one JSON line to ``bench/out/results.jsonl``.

    .venv/bin/python -m bench.cluster                       # everything, ~5 min
    .venv/bin/python -m bench.cluster --n 2000 --reps 1     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.store.keys import QueueKeys
from app.store.lua.scripts import ReplicaAcks, Scripts
from app.store.redis.connection import AsyncRedis, async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import BENCH_HANDLERS, log
from bench.report import _table
from bench.throughput import DEADLINE_S, POLL_S, WORKER_CONCURRENCY
from tools.clusters import LocalCluster

PREFIX = "lh"
ACK_TIMEOUT_S = 1.0


@dataclass
class Target:
    """One deployment under test: its URL, a client on it, and its queue names."""

    name: str
    url: str
    client: AsyncRedis
    queues_for: Callable[[int], list[str]]  # how many queues -> their names


def store_on(client: AsyncRedis, acks: int = 0) -> RunStore:
    """A RunStore with the defaults, optionally waiting for replica acknowledgements."""
    scripts = Scripts(replica_acks=ReplicaAcks(acks, int(ACK_TIMEOUT_S * 1000)))
    return RunStore.for_settings(client, scripts, Settings(prefix=PREFIX))


async def unfinished(client: AsyncRedis, queues: list[str]) -> int:
    """Runs not yet terminal on these queues: ready, delayed or leased (one pipeline)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        keys = QueueKeys(PREFIX, queue)
        pipe.get(keys.queued)  # runs in the queue's lanes (the scripts keep the count)
        pipe.zcard(keys.delayed)
        pipe.zcard(keys.leases)
    counts: list[int | str | None] = await pipe.execute()
    return sum(int(count or 0) for count in counts)


async def rep(
    target: Target, *, queues: list[str], n: int, workers: int, acks: int, tag: str
) -> dict[str, Any]:
    """Create ``n`` runs over ``queues``, then time ``workers`` fresh workers until all end."""
    await target.client.flushall()  # the benchmark's own servers, never another Redis
    load = harness.load_average()
    store = store_on(target.client)
    t_e0 = time.perf_counter()
    for index in range(n):
        await store.create(NewRun(handler="demo.echo", input={}, queue=queues[index % len(queues)]))
    enqueue_s = time.perf_counter() - t_e0
    env = {
        "LEASEHOLD_REDIS_URL": target.url,
        "LEASEHOLD_HANDLERS": BENCH_HANDLERS,
        "LEASEHOLD_QUEUES": ",".join(queues),
        "LEASEHOLD_REPLICA_ACKS": str(acks),
        "LEASEHOLD_REPLICA_ACK_TIMEOUT_S": str(ACK_TIMEOUT_S),
    }
    args = ["worker", "--concurrency", str(WORKER_CONCURRENCY)]
    cpu_before = await redis_cpu_s(target.client)
    workers_cpu_before = harness.children_cpu_s()
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        for index in range(workers):
            stack.enter_context(harness.running(f"worker-{tag}-{index}", args, env))
        left = await _wait_done(target.client, queues, t0)
        elapsed = time.perf_counter() - t0
    cpu_after = await redis_cpu_s(target.client)
    workers_cpu_s = harness.children_cpu_s() - workers_cpu_before  # start-up and drain too
    per_primary = sorted(
        (round((cpu_after[node] - cpu_before.get(node, 0.0)) / n * 1e6, 1) for node in cpu_after),
        reverse=True,
    )
    log(f"{tag}: {n / elapsed:.0f} runs/s ({left} left), redis CPU us/run {per_primary}")
    return {
        "elapsed_s": round(elapsed, 3),
        "runs_per_s": round(n / elapsed, 1) if left == 0 else None,
        "enqueue_runs_per_s": round(n / enqueue_s, 1),
        "redis_cpu_us_per_run_by_primary": per_primary,
        "worker_cpu_us_per_run": round(workers_cpu_s / n * 1e6, 1),
        "load_before": load,
    }


async def redis_cpu_s(client: AsyncRedis) -> dict[str, float]:
    """CPU seconds (user + system) each primary has used so far."""
    if isinstance(client, aioredis.RedisCluster):
        per_node = await client.info("cpu", target_nodes=aioredis.RedisCluster.PRIMARIES)
    else:
        per_node = {"single": await client.info("cpu")}
    return {
        node: float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        for node, info in per_node.items()
    }


async def _wait_done(client: AsyncRedis, queues: list[str], t0: float) -> int:
    left = await unfinished(client, queues)
    while left and time.perf_counter() - t0 < DEADLINE_S:
        await asyncio.sleep(POLL_S)
        left = await unfinished(client, queues)
    return left


async def throughput(
    target: Target, *, queue_counts: list[int], acks: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every queue count on one deployment, ``args.reps`` repetitions each."""
    results = []
    for count in queue_counts:
        queues = target.queues_for(count)
        label = f"{target.name}-q{count}-acks{acks}"
        reps = [
            await rep(
                target, queues=queues, n=args.n, workers=args.workers, acks=acks, tag=f"{label}-{i}"
            )
            for i in range(args.reps)
        ]
        rates = [r["runs_per_s"] for r in reps if r["runs_per_s"]]
        results.append(
            {
                "deployment": target.name,
                "queues": count,
                "replica_acks": acks,
                "n": args.n,
                "workers": args.workers,
                "median_runs_per_s": round(harness.median(rates), 1) if rates else None,
                "min_runs_per_s": min(rates, default=None),
                "max_runs_per_s": max(rates, default=None),
                "median_enqueue_runs_per_s": harness.median(
                    [r["enqueue_runs_per_s"] for r in reps]
                ),
                "redis_cpu_us_per_run_by_primary": reps[-1]["redis_cpu_us_per_run_by_primary"],
                "median_worker_cpu_us_per_run": harness.median(
                    [r["worker_cpu_us_per_run"] for r in reps]
                ),
                "reps": reps,
            }
        )
    return results


async def create_latency(target: Target, *, acks: int, count: int) -> dict[str, Any]:
    """Latency of one durable write (``create``) at a time, with or without WAIT."""
    await target.client.flushall()
    store = store_on(target.client, acks)
    samples = []
    for _ in range(count):
        t = time.perf_counter()
        await store.create(NewRun(handler="demo.echo", input={}, queue="default"))
        samples.append((time.perf_counter() - t) * 1000)
    return {
        "deployment": target.name,
        "replica_acks": acks,
        "creates": count,
        "p50_ms": round(harness.percentile(samples, 50), 3),
        "p99_ms": round(harness.percentile(samples, 99), 3),
        "short_acks": store.scripts.short_acks,
    }


def balanced_queues(cluster: LocalCluster, count: int) -> list[str]:
    """Queues spread over the primaries as evenly as ``count`` allows."""
    primaries = cluster.current_primaries()
    per_primary = [cluster.queues_on(primary, PREFIX, count) for primary in primaries]
    spread = [queue for group in zip(*per_primary, strict=True) for queue in group]
    return spread[:count]


@contextlib.asynccontextmanager
async def single_node(base: Path) -> AsyncIterator[Target]:
    """One redis-server, as ``make bench`` uses."""
    server = EmbeddedRedis(data_dir=base / "single", appendonly=False).start()
    client = async_client(server.url)
    try:
        yield Target("single", server.url, client, lambda n: [f"q{i}" for i in range(n)])
    finally:
        await client.aclose()
        server.stop()


@contextlib.asynccontextmanager
async def cluster(base: Path, *, replicas: int) -> AsyncIterator[Target]:
    """A 3-primary cluster (with ``replicas`` per primary)."""
    local = LocalCluster(base / f"cluster-r{replicas}", primaries=3, replicas=replicas)
    with _stopping(local):
        local.start()
        client = async_client(local.url)
        try:
            name = "cluster-3p" if not replicas else "cluster-3p3r"
            yield Target(name, local.url, client, lambda n: balanced_queues(local, n))
        finally:
            await client.aclose()


@contextlib.contextmanager
def _stopping(local: LocalCluster) -> Iterator[None]:
    try:
        yield
    finally:
        local.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults are what BENCHMARKS.md reports."""
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="runs per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="worker processes per rep")
    parser.add_argument("--creates", type=int, default=1000, help="creates timed for latency")
    parser.add_argument("--label", default="", help="free text stored with the results")
    return parser.parse_args(argv)


async def measure(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every deployment in turn, one at a time so they never compete with each other."""
    result: dict[str, Any] = {"throughput": [], "create_latency": []}
    async with single_node(base) as target:
        result["throughput"] += await throughput(target, queue_counts=[1, 4], acks=0, args=args)
    async with cluster(base, replicas=0) as target:
        result["throughput"] += await throughput(target, queue_counts=[1, 2, 4], acks=0, args=args)
    async with cluster(base, replicas=1) as target:
        for acks in (0, 1):
            result["throughput"] += await throughput(target, queue_counts=[4], acks=acks, args=args)
            result["create_latency"].append(
                await create_latency(target, acks=acks, count=args.creates)
            )
    return result


def print_report(result: dict[str, Any]) -> None:
    """The two tables BENCHMARKS.md copies."""
    _table(
        [
            "deployment",
            "queues",
            "REPLICA_ACKS",
            "runs/s median (range)",
            "enqueue runs/s",
            "worker CPU us/run",
            "redis CPU us/run per primary",
        ],
        [
            [
                row["deployment"],
                row["queues"],
                row["replica_acks"],
                f"{row['median_runs_per_s']} ({row['min_runs_per_s']}-{row['max_runs_per_s']})",
                row["median_enqueue_runs_per_s"],
                row["median_worker_cpu_us_per_run"],
                " / ".join(str(us) for us in row["redis_cpu_us_per_run_by_primary"]),
            ]
            for row in result["throughput"]
        ],
    )
    _table(
        ["deployment", "REPLICA_ACKS", "create p50 ms", "create p99 ms", "short acks"],
        [
            [
                row["deployment"],
                row["replica_acks"],
                row["p50_ms"],
                row["p99_ms"],
                row["short_acks"],
            ]
            for row in result["create_latency"]
        ],
    )


async def main(argv: list[str] | None = None) -> None:
    """Measure every deployment, print the tables, append the JSON line."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-cluster-") as base:
        result = {
            "benchmark": "cluster",
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "label": args.label,
            "machine": harness.machine(),
            "load_at_start": harness.load_average(),
            **await measure(Path(base), args),
        }
    path = harness.record(result)
    print_report(result)
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
