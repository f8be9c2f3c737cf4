"""What holding many leases costs: 5,000 sleeping runs in one worker.

The design promise (DESIGN §5) is one renewal round trip per queue per TTL/3,
however many runs the worker holds. This measures it from the server's side:
with every run claimed, ``SLOWLOG`` records every command (threshold 0) for a
few heartbeat periods, and each EVALSHA is named by its script's SHA. The
renewal's own cost is reported twice: the server's execution time (slowlog
duration) and a client round trip of the same ``renew_leases`` call with the
worker's owner id and fences, made from this process with the heartbeat's
:class:`~app.store.leases.store.LeaseRenewer`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, cast

from app.store.leases.store import Lease, LeaseRenewer
from app.store.lua.scripts import Scripts
from app.store.redis.connection import sync_client
from app.store.runs.new import NewRun
from bench import harness, slow_log
from bench.harness import Bench, log

CLAIM_TIMEOUT_S = 180.0
CLIENT_RENEWALS = 5


async def _create_sleepers(bench: Bench, runs: int, seconds: float) -> None:
    sleep = {"seconds": seconds, "progress_every_s": seconds}
    for _ in range(runs):
        await bench.store.create(NewRun(handler="demo.sleep", input=sleep))


async def _wait_all_leased(bench: Bench, runs: int) -> float:
    started = time.monotonic()
    while await bench.client.zcard(bench.keys.leases) < runs:
        if time.monotonic() - started > CLAIM_TIMEOUT_S:
            raise RuntimeError(f"the worker did not claim {runs} runs")
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def _held_leases(bench: Bench) -> tuple[str, list[Lease]]:
    run_ids = cast(list[str], await bench.client.zrange(bench.keys.leases, 0, -1))
    pipe = bench.client.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hmget(bench.keys.run(run_id), "owner_id", "fence")
    rows = await pipe.execute()
    owners = Counter(owner for owner, _ in rows)
    owner = owners.most_common(1)[0][0]
    return owner, [
        Lease(bench.queue, run_id, owner, int(fence))
        for run_id, (held_by, fence) in zip(run_ids, rows, strict=True)
        if held_by == owner
    ]


def _client_renewals(bench: Bench, owner: str, leases: list[Lease], ttl_ms: int) -> list[float]:
    """Round-trip times (ms) of the heartbeat's own renew call, made from here."""
    client = sync_client(bench.url)
    renewer = LeaseRenewer(
        client, scripts=Scripts(), prefix=bench.store.prefix, lease_ttl_ms=ttl_ms
    )
    times = []
    try:
        for _ in range(CLIENT_RENEWALS):
            started = time.perf_counter()
            answers = renewer.renew(leases)
            times.append((time.perf_counter() - started) * 1000)
            if len(answers) != len(leases):
                raise RuntimeError("renew_leases answered for fewer leases than it was given")
    finally:
        client.close()
    return times


def _summary(grouped: dict[str, list[int]], periods: float) -> dict[str, Any]:
    renewals = grouped.get("evalsha:renew_leases", [])
    scripts = {name: len(d) for name, d in grouped.items() if name.startswith("evalsha")}
    return {
        "periods_observed": round(periods, 2),
        "renew_calls": len(renewals),
        "renew_calls_per_period": round(len(renewals) / periods, 2),
        "renew_server_ms": [round(us / 1000, 2) for us in renewals],
        "evalsha_per_period": round(sum(scripts.values()) / periods, 2),
        "evalsha_by_script": scripts,
        "commands_per_period": round(sum(len(d) for d in grouped.values()) / periods, 2),
        "commands_seen": {name: len(d) for name, d in grouped.items()},
    }


async def heartbeat_cost(bench: Bench, *, runs: int, ttl_s: float, periods: int) -> dict[str, Any]:
    """Hold ``runs`` sleeping runs in one worker and measure what renewing them costs."""
    await bench.reset()
    period_s = ttl_s / 3
    await _create_sleepers(bench, runs, seconds=3600)
    load = harness.load_average()
    log(f"heartbeat: {runs} sleeping runs, TTL {ttl_s:g}s (load {load[0]:.2f})")
    args = ["worker", "--concurrency", str(runs), "--lease-ttl-s", str(ttl_s)]
    env = bench.env(LEASEHOLD_DRAIN_TIMEOUT_S="0")
    with harness.running("worker-heartbeat", args, env):
        claim_s = await _wait_all_leased(bench, runs)
        await asyncio.sleep(period_s)  # one full beat over the complete table first
        async with slow_log.every_command(bench.client) as entries:
            await asyncio.sleep(periods * period_s)
        owner, leases = await _held_leases(bench)
        client_ms = await asyncio.to_thread(
            _client_renewals, bench, owner, leases, round(ttl_s * 1000)
        )
    result = {
        "runs": runs,
        "leases_held": len(leases),
        "lease_ttl_s": ttl_s,
        "renew_interval_s": round(period_s, 3),
        "claim_all_s": round(claim_s, 2),
        "renew_client_round_trip_ms": [round(ms, 2) for ms in client_ms],
        "renew_client_round_trip_median_ms": round(harness.median(client_ms), 2),
        "load_before": load,
        **_summary(slow_log.by_script(entries), periods),
    }
    log(
        f"heartbeat: {result['renew_calls_per_period']} renewals/period, "
        f"renew RTT {result['renew_client_round_trip_median_ms']} ms"
    )
    return result
