"""Enqueue→start latency at a steady rate against a warm, idle worker.

The same steps as the peer harness's ``latency``: start one worker, warm it up
until it has run three runs, wait a second, then create ``rate * seconds`` runs
at a fixed pace. The producer stamps ``time.time()`` right before each create;
``bench.lat`` stamps its own start as its first statement.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.store.runs.new import NewRun
from bench import harness
from bench.handlers import LATENCY_KEY
from bench.harness import COUNTER_READS, Bench, RedisCounters, log

WARMUP_RUNS = 3
WARMUP_GAP_S = 0.3
WARMUP_TIMEOUT_S = 60.0
SETTLE_S = 1.0
COLLECT_TIMEOUT_S = 30.0


async def _create(bench: Bench) -> None:
    await bench.store.create(NewRun(handler="bench.lat", input={"enqueued_at": time.time()}))


async def _warm_up(bench: Bench) -> None:
    started = time.monotonic()
    while await bench.client.llen(LATENCY_KEY) < WARMUP_RUNS:
        if time.monotonic() - started > WARMUP_TIMEOUT_S:
            raise RuntimeError("the worker ran no run during warm-up")
        await _create(bench)
        await asyncio.sleep(WARMUP_GAP_S)
    await asyncio.sleep(SETTLE_S)
    await bench.client.delete(LATENCY_KEY)


async def _produce_paced(bench: Bench, total: int, rate: float) -> None:
    t0 = time.perf_counter()
    for i in range(total):
        pause = t0 + i / rate - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        await _create(bench)


async def _collect(bench: Bench, total: int) -> tuple[list[float], int]:
    """Latencies in ms, once all arrived (or the timeout passed); and how many polls it took."""
    deadline = time.monotonic() + COLLECT_TIMEOUT_S
    polls = 0
    while time.monotonic() < deadline:
        polls += 1
        if await bench.client.llen(LATENCY_KEY) >= total:
            break
        await asyncio.sleep(0.1)
    pairs = [entry.split() for entry in await bench.client.lrange(LATENCY_KEY, 0, -1)]
    values = [(float(started) - float(enqueued)) * 1000 for enqueued, started in pairs]
    return values, polls


def worker_round_trips(delta: RedisCounters, *, runs: int, polls: int) -> float:
    """The worker's round trips per run at this rate.

    Every read event is a round trip; the benchmark's own are taken out: one
    create and one ``bench.lat`` RPUSH per run, the polls, the counter reads.
    """
    own = 2 * runs + polls + COUNTER_READS
    return round((delta.reads - own) / runs, 2)


async def latency(bench: Bench, *, rate: float, seconds: float) -> dict[str, Any]:
    """p50/p99/max enqueue→start in ms over ``rate * seconds`` runs."""
    await bench.reset()
    load = harness.load_average()
    log(f"latency: {rate:g} runs/s for {seconds:g}s (load {load[0]:.2f})")
    total = int(rate * seconds)
    args = ["worker", "--concurrency", "50"]
    with harness.running("worker-latency", args, bench.env()):
        await _warm_up(bench)
        before = await harness.counters(bench.client)
        await _produce_paced(bench, total, rate)
        values, polls = await _collect(bench, total)
        delta = (await harness.counters(bench.client)).minus(before)
    result = {
        "rate": rate,
        "seconds": seconds,
        "sent": total,
        "received": len(values),
        "p50_ms": round(harness.percentile(values, 50), 2),
        "p99_ms": round(harness.percentile(values, 99), 2),
        "max_ms": round(max(values), 2) if values else None,
        "worker_round_trips_per_run": worker_round_trips(delta, runs=total, polls=polls),
        "load_before": load,
    }
    log(f"latency: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
    return result
