"""Rate limits at 1,000 tokens/s: what a bucket admits, what a take costs, claims per run.

Two parts, on a private redis-server:

* **handler bucket** (``take_tokens``, what ``ctx.rate_limit`` sends): ``--takers``
  tasks on four connections take one token each, as fast as they may, for
  ``--seconds``; each reserved token is slept for, as a handler would. Reports the
  achieved rate against the limit, the worst 1 s window against limit + burst, the
  round trips (scripts) per token and a take's latency.
* **start gate** (``rate_limits`` on create, ``rate_hold`` in ``claim_runs``):
  ``--runs`` runs naming one 1,000/s start bucket, claimed by a loop that behaves
  like a worker's courier (claim up to ``--batch``; when it gets nothing, sleep
  until the earliest delayed run is due). Reports starts/s, the worst window, and
  claim round trips per started run, beside the same loop on ungated runs.

``python -m bench.rate_limits`` (``--seconds 5 --takers 64 --runs 5000``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from app.models.read import RateLimitSpec
from app.store.context import StoreContext
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Scripts
from app.store.ratelimits.store import Declared, RateLimitStore, StartGate
from app.store.redis.connection import async_client
from app.store.retention import Retention
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import log, percentile

PREFIX = "lhbench"
QUEUE = "default"
SPEC = RateLimitSpec(limit=1000, period_s=1.0, burst=50)


def worst_window(times_ms: list[float], window_ms: float) -> int:
    """The most timestamps inside any closed window of ``window_ms``."""
    ordered, most, start = sorted(times_ms), 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] > window_ms:
            start += 1
        most = max(most, end - start + 1)
    return most


async def _taker(
    rate: RateLimitStore, bucket: Declared, stop_ms: int, grants: list[int], rtts: list[float]
) -> None:
    while True:
        sent = time.perf_counter()
        token = await rate.take(bucket, cost=1, max_wait_ms=60_000)
        rtts.append((time.perf_counter() - sent) * 1000)
        if token.until_ms >= stop_ms:
            return
        grants.append(token.until_ms)
        if token.wait_ms:
            await asyncio.sleep(token.wait_ms / 1000)


async def handler_bucket(url: str, *, seconds: float, takers: int) -> dict[str, Any]:
    """``takers`` tasks on 4 connections share one bucket for ``seconds``."""
    clients = [async_client(url) for _ in range(4)]
    stores = [
        RateLimitStore(client, scripts=Scripts(), prefix=PREFIX, max_keys=10) for client in clients
    ]
    bucket = Declared("openai", "openai", SPEC)
    start_ms = (await stores[0].take(bucket, cost=0, max_wait_ms=0)).now_ms
    stop_ms = start_ms + int(seconds * 1000)
    grants: list[int] = []
    rtts: list[float] = []
    await asyncio.gather(
        *(_taker(stores[i % 4], bucket, stop_ms, grants, rtts) for i in range(takers))
    )
    for client in clients:
        await client.aclose()
    span_s = (max(grants) - start_ms) / 1000
    return {
        "limit_per_s": SPEC.limit,
        "burst": SPEC.burst,
        "takers": takers,
        "tokens": len(grants),
        "tokens_per_s": round(len(grants) / span_s, 1),
        "worst_1s_window": worst_window([float(g) for g in grants], 1000),
        "bound_limit_plus_burst": SPEC.limit + SPEC.burst,
        "scripts_per_token": round(len(rtts) / len(grants), 3),
        "take_p50_ms": round(percentile(rtts, 50), 3),
        "take_p99_ms": round(percentile(rtts, 99), 3),
    }


async def start_gate(url: str, *, runs: int, batch: int, gated: bool) -> dict[str, Any]:
    """Create ``runs`` runs (gated or not), claim them like a courier; starts and claims."""
    client = async_client(url)
    await client.flushall()
    retention = Retention.uniform(3_600_000)
    stores = StoreContext(
        client,
        Scripts(),
        PREFIX,
        events_maxlen=100,
        retention=retention,
        lease_ttl_ms=600_000,
        queued_ttl_ms=3_600_000,
    )
    store, leases = RunStore(stores), LeaseStore(stores)
    gates = (StartGate("openai", SPEC),) if gated else ()
    news = [NewRun(handler="demo.echo", input={}, rate_limits=gates) for _ in range(runs)]
    for i in range(0, runs, 500):
        await store.create_many(news[i : i + 500])
    started_ids: list[str] = []
    claims = 0
    began = time.perf_counter()
    while len(started_ids) < runs:
        claim = await leases.claim(QUEUE, "bench-worker", batch)
        claims += 1
        if claim.runs:
            started_ids.extend(run.id for run in claim.runs)
        elif claim.next_due_ms is not None:
            server_s, micros = await client.time()
            due_in_ms = claim.next_due_ms - (server_s * 1000 + micros / 1000)
            await asyncio.sleep(max(0.0, due_in_ms) / 1000)
    took_s = time.perf_counter() - began
    pipe = client.pipeline(transaction=False)
    for run_id in started_ids:
        pipe.hget(leases.keys(QUEUE).run(run_id), "started_at")
    started = [float(ms) for ms in await pipe.execute()]  # the claim's Redis clock
    await client.aclose()
    return {
        "gated": gated,
        "runs": runs,
        "batch": batch,
        "starts_per_s": round(runs / took_s, 1),
        "claims": claims,
        "claims_per_run": round(claims / runs, 3),
        "worst_1s_window": worst_window(started, 1000) if gated else None,
    }


async def main(args: argparse.Namespace) -> None:
    """Run both parts on a private Redis and record the result under bench/out."""
    async with harness.private_redis("rate-limits") as redis:
        result: dict[str, Any] = {
            "header": await harness.header(redis.client, "rate limits"),
            "handler_bucket": await handler_bucket(
                redis.url, seconds=args.seconds, takers=args.takers
            ),
            "start_gate": [
                await start_gate(redis.url, runs=args.runs, batch=args.batch, gated=False),
                await start_gate(redis.url, runs=args.runs, batch=args.batch, gated=True),
            ],
        }
    log(result)
    harness.record(result)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--takers", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=32)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
