"""Runs created per second through ONE API process: POST /runs one by one vs POST /runs/batch.

``python -m bench.bulk_create [--runs 20000] [--batch 100 500 1000] [--clients 4]``
starts its own redis-server (no persistence) and one ``leasehold api`` (the
default handlers and queue, no worker: what is measured is the create path),
then for each mode creates ``--runs`` ``demo.echo`` runs from ``--clients``
concurrent HTTP/1.1 connections and reports runs/s from the first request sent
to the last answer received. ``single`` posts one run per request (the
"before"); ``batch-N`` posts N per request. Every run carries its own
idempotency key, as a producer retrying safely would. Each answer is checked
(every item 201, as many ids as runs) and Redis's own count of runs in the
queue's index must match, so a fast wrong answer cannot pass.

Bodies are encoded before the clock starts, so what is timed is the API and
Redis, not this client's JSON encoding. The load average before each mode is
recorded: the machine is shared, so each mode also reports what is stable
under load: the API process's CPU per run (``/proc/<pid>/stat``), the Redis
server's (``INFO cpu``), this client's own (``time.process_time``; it counts each
answer's created items rather than decoding the answer: :func:`created_in`) and the
script calls and commands per run (``INFO commandstats``). One JSON line goes
to ``bench/out/results.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx

from app.settings import Settings
from app.stack import processes
from app.stack.embedded import free_port
from app.stack.processes import child_env
from app.store.keys import QueueKeys
from bench.harness import (
    LOG_DIR,
    counters,
    header,
    load_average,
    log,
    private_redis,
    record,
    stop,
)
from bench.sse import process_cpu_s

PREFIX = Settings.model_fields["prefix"].default


def bodies(mode: str, runs: int, batch: int, tag: str) -> list[tuple[bytes, int]]:
    """The request bodies of one mode, encoded up front, each with the runs it asks for."""

    def item(i: int) -> dict[str, Any]:
        return {
            "handler": "demo.echo",
            "input": {"message": f"run {i}"},
            "idempotency_key": f"{tag}-{i}",
        }

    if mode == "single":
        return [(json.dumps(item(i)).encode(), 1) for i in range(runs)]
    return [
        (json.dumps({"items": [item(i) for i in range(start, end)]}).encode(), end - start)
        for start, end in ((start, min(start + batch, runs)) for start in range(0, runs, batch))
    ]


async def send_all(
    http: httpx.AsyncClient, path: str, payloads: list[tuple[bytes, int]], clients: int
) -> int:
    """POST every payload over ``clients`` connections; the runs the answers say were created."""
    queue: asyncio.Queue[tuple[bytes, int]] = asyncio.Queue()
    for payload in payloads:
        queue.put_nowait(payload)
    created = 0

    async def client() -> None:
        nonlocal created
        while not queue.empty():
            payload, sent = queue.get_nowait()
            response = await http.post(
                path, content=payload, headers={"content-type": "application/json"}
            )
            if response.status_code not in (200, 201):
                raise RuntimeError(f"{path}: HTTP {response.status_code} {response.text[:300]}")
            if path == "/runs":
                created += 1
                continue
            created += created_in(response.content, sent=sent)

    await asyncio.gather(*(client() for _ in range(clients)))
    return created


def created_in(answer: bytes, *, sent: int) -> int:
    """The runs a batch's answer says were created: every one of the ``sent`` items, or raise.

    Each created item's answer starts with ``{"status":201,"run":`` (the API writes it
    so), so counting that is the check, without decoding the ~0.5 MB answer of a batch
    of 500 (which took most of this client's CPU: it shares the two cores it measures).
    Anything else is decoded to say what it was.
    """
    created = answer.count(b'{"status":201,"run":{')
    if created != sent:
        statuses = sorted({item["status"] for item in json.loads(answer)["items"]})
        raise RuntimeError(f"batch of {sent} answered {created} created, statuses {statuses}")
    return created


async def measure(
    http: httpx.AsyncClient, redis: Any, api_pid: int, mode: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One mode: runs/s and CPU per run, checked against the answers and Redis's own index."""
    batch = int(mode.split("-")[1]) if mode.startswith("batch-") else 1
    payloads = bodies(mode, args.runs, batch, tag=f"{mode}-{time.time_ns()}")
    path = "/runs" if mode == "single" else "/runs/batch"
    runs_key = QueueKeys(PREFIX, "default").runs
    before = await redis.zcard(runs_key)
    load = load_average()
    redis_before, api_cpu_before = await counters(redis), process_cpu_s(api_pid)
    started, client_cpu_before = time.perf_counter(), time.process_time()
    created = await send_all(http, path, payloads, args.clients)
    elapsed_s = time.perf_counter() - started
    client_cpu_s = time.process_time() - client_cpu_before
    api_cpu_s = process_cpu_s(api_pid) - api_cpu_before
    spent = (await counters(redis)).minus(redis_before)
    stored = await redis.zcard(runs_key) - before
    if created != args.runs or stored != args.runs:
        raise RuntimeError(f"{mode}: {created} answered created, {stored} stored of {args.runs}")
    rate = round(args.runs / elapsed_s)
    row = {
        "mode": mode,
        "runs": args.runs,
        "seconds": round(elapsed_s, 3),
        "runs_per_s": rate,
        "load_before": load,
        "api_cpu_us_per_run": round(api_cpu_s / args.runs * 1e6, 1),
        "redis_cpu_us_per_run": round(spent.cpu_s / args.runs * 1e6, 1),
        # this client's own CPU (httpx, reading and checking every answer): what it
        # takes from the two cores the API and Redis share
        "client_cpu_us_per_run": round(client_cpu_s / args.runs * 1e6, 1),
        "scripts_per_run": round(spent.scripts / args.runs, 3),
        "commands_per_run": round(spent.total / args.runs, 2),
    }
    log(
        f"{mode}: {args.runs} runs in {elapsed_s:.2f}s = {rate}/s (load {load[0]:.2f}), "
        f"API {row['api_cpu_us_per_run']} / Redis {row['redis_cpu_us_per_run']} / client "
        f"{row['client_cpu_us_per_run']} us CPU per run"
    )
    return row


async def main(args: argparse.Namespace) -> None:
    """Start Redis and one API, run each mode ``--reps`` times, record the median."""
    async with private_redis("bulk-create") as redis:
        # BENCH_API_PORT: a fixed one (a range agreed with others sharing the machine)
        port = int(os.environ.get("BENCH_API_PORT", "0")) or free_port()
        env = {
            "LEASEHOLD_REDIS_URL": redis.url,
            "LEASEHOLD_API_PORT": str(port),
            "LEASEHOLD_HANDLERS": "app.demo",
            "LEASEHOLD_LOG_LEVEL": "WARNING",
        }
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log_path = LOG_DIR / "bulk-create-api.log"
        api = processes.spawn("api", ["api"], env=child_env(env), log_path=log_path)
        modes = [*(["single"] if args.single else []), *(f"batch-{size}" for size in args.batch)]
        results: list[dict[str, Any]] = []
        try:
            url = f"http://127.0.0.1:{port}"
            processes.wait_healthy(url, api, timeout_s=60)
            limits = httpx.Limits(max_connections=args.clients)
            async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
                for mode in modes:
                    reps = [
                        await measure(http, redis.client, api.pid, mode, args)
                        for _ in range(args.reps)
                    ]
                    reps.sort(key=lambda rep: rep["runs_per_s"])
                    results.append(
                        {
                            **reps[len(reps) // 2],
                            "all_runs_per_s": [rep["runs_per_s"] for rep in reps],
                        }
                    )
        finally:
            stop(api)
        result = {
            **(await header(redis.client, args.label)),
            "bench": "bulk_create",
            "clients": args.clients,
            "modes": results,
        }
    record(result)
    print(
        f"{'mode':<12} {'runs/s':>8}  {'all reps':<24} {'API us/run':>10} {'Redis us/run':>12} "
        f"{'client us/run':>13} {'cmds/run':>8}  load before"
    )
    for row in results:
        print(
            f"{row['mode']:<12} {row['runs_per_s']:>8}  {row['all_runs_per_s']!s:<24} "
            f"{row['api_cpu_us_per_run']:>10} {row['redis_cpu_us_per_run']:>12} "
            f"{row['client_cpu_us_per_run']:>13} {row['commands_per_run']:>8}  "
            f"{row['load_before'][0]:.2f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs per mode and repetition")
    parser.add_argument("--batch", type=int, nargs="*", default=[100, 500, 1000])
    parser.add_argument(
        "--no-single", dest="single", action="store_false", help="skip one-run-per-request"
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections")
    parser.add_argument("--reps", type=int, default=3, help="median of this many")
    parser.add_argument("--label", default="bulk-create")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
