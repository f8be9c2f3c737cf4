"""Enqueue→start at 50 runs/s, split into steps: where a run's start spends its µs.

``python -m bench.latency_steps [--n 500] [--rate 50] [--worker-cpu 1] [--no-probe] [--hold-ms 50]``

The method of :mod:`bench.latency` (one warm idle worker, ``--concurrency 50``, runs
created through the store at a steady pace, the producer stamps the time before its
create, ``bench.lat`` stamps its first statement), with the producer's create split
into its parts and the worker loaded with :mod:`bench.wake_probe`, which stamps each
step from the wake message to the handler. Prints p50/p90/p99 per step, the worker's
CPU per run over the paced phase (``/proc``), and how many runs had a GC pass, a
reconciler scan or an outbox sweep inside their window; and per run how long the worker,
redis-server and the producer waited for a core (``/proc/<pid>/schedstat``) and how often
each slept. Absolute figures move with the
machine's load; per-step figures of two checkouts alternated in the same minutes do
not move much (BENCHMARKS.md, "Enqueue→start latency"). ``--worker-cpu 1`` pins the
worker to that core (run the whole command under ``taskset -c 0``: Redis and the
producer then share core 0). Run it from the checkout to measure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import CREATE_RUN, RunStore
from bench import harness
from bench.handlers import LATENCY_KEY
from bench.wake_probe import OUT_ENV

WARMUP_RUNS = 3
STEPS = [  # (name, from, to): a, b, ... are bench.wake_probe's stamps; p* the producer's
    ("producer: NewRun", "p0", "p1"),
    ("producer: create_args", "p1", "p2"),
    ("producer: create round trip", "p2", "p3"),
    ("create sent -> inbox row read (hand-off)", "p2", "a_inbox"),
    ("inbox row -> _start_run (hand-off)", "a_inbox", "g_start_run"),
    ("create sent -> wake dispatched", "p2", "a_dispatch"),
    ("dispatch -> courier runs", "a_dispatch", "b_courier_woke"),
    ("courier -> finish_and_claim", "b_courier_woke", "c_claim_call"),
    ("claim built, sent", "c_claim_call", "d_sent"),
    ("claim round trip", "d_sent", "e_reply"),
    ("claim reply parsed", "e_reply", "f_claim_parsed"),
    ("-> _start_run", "f_claim_parsed", "g_start_run"),
    ("_start_run (RunExecution)", "g_start_run", "h_task_created"),
    ("-> run task runs", "h_task_created", "i_task_runs"),
    ("task -> _call (slot, input)", "i_task_runs", "j_call"),
    ("_call -> handler", "j_call", "handler"),
    ("total", "p0", "handler"),
]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sched(pid: int) -> tuple[float, int]:
    """Run-queue wait (s: runnable, waiting for a core) and sleeps (voluntary context
    switches) of ``pid``'s main thread so far: how much of a start went to the scheduler."""
    wait_ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1])
    status = Path(f"/proc/{pid}/status").read_text()
    sleeps = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return wait_ns / 1e9, sleeps


def _pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` (the heartbeat's, the handlers' pool) on ``cpu`` only."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


async def _create(store: RunStore, produced: list[dict[str, Any]], hold_s: float = 0.0) -> None:
    p0 = time.time()
    body: dict[str, Any] = {"enqueued_at": p0, "hold_s": hold_s} if hold_s else {"enqueued_at": p0}
    new = NewRun(handler="bench.lat", input=body)
    p1 = time.time()
    args = store.create_args(new)
    p2 = time.time()
    reply = await CREATE_RUN.send(store.scripts, store.client, store.keys(new.queue), args)
    produced.append({"p0": p0, "p1": p1, "p2": p2, "p3": time.time(), "id": reply.run_id})


async def _measure(args: argparse.Namespace, probe_out: str) -> dict[str, Any]:
    async with harness.private_redis("latency-steps", args.port) as server:
        store = RunStore.for_settings(server.client, Scripts(), Settings(redis_url=server.url))
        handlers = "app.demo,bench.handlers" + ("" if args.no_probe else ",bench.wake_probe")
        env = {
            "LEASEHOLD_REDIS_URL": server.url,
            "LEASEHOLD_HANDLERS": handlers,
            "LEASEHOLD_QUEUES": "default",
            OUT_ENV: probe_out,
        }
        produced: list[dict[str, Any]] = []
        load = harness.load_average()
        with harness.running("worker-latency-steps", ["worker", "--concurrency", "50"], env) as w:
            if args.worker_cpu:
                _pin(w.pid, int(args.worker_cpu))
            while await server.client.llen(LATENCY_KEY) < WARMUP_RUNS:
                await _create(store, produced)
                await asyncio.sleep(0.3)
            await asyncio.sleep(1.0)
            await server.client.delete(LATENCY_KEY)
            produced.clear()
            redis_pid = int((await server.client.info("server"))["process_id"])
            pids = {"worker": w.pid, "redis": redis_pid, "producer": os.getpid()}
            sched_before = {name: _sched(pid) for name, pid in pids.items()}
            cpu_before = _cpu_s(w.pid)
            t0 = time.perf_counter()
            for i in range(args.n):
                await asyncio.sleep(max(0.0, t0 + i / args.rate - time.perf_counter()))
                await _create(store, produced, args.hold_ms / 1000)
            for _ in range(300):  # at most 30 s for the last starts to be recorded
                if await server.client.llen(LATENCY_KEY) >= args.n:
                    break
                await asyncio.sleep(0.1)
            cpu_s = _cpu_s(w.pid) - cpu_before
            sched = {
                name: [
                    now - before
                    for now, before in zip(_sched(pid), sched_before[name], strict=True)
                ]
                for name, pid in pids.items()
            }
            pairs = [entry.split() for entry in await server.client.lrange(LATENCY_KEY, 0, -1)]
    started = {float(enqueued): float(start) for enqueued, start in pairs}
    for run in produced:
        run["handler"] = started.get(run["p0"])
    per_run = {
        name: (wait / args.n * 1e6, sleeps / args.n) for name, (wait, sleeps) in sched.items()
    }
    return {
        "load": load,
        "runs": produced,
        "worker_cpu_us_per_run": cpu_s / args.n * 1e6,
        "sched_per_run": per_run,
    }


def _attach_probe(runs: list[dict[str, Any]], events: list[list[Any]]) -> None:
    """Give each run the stamps of its own start: its own, and the last of each before it."""
    by_id = {run["id"]: run for run in runs}
    last: dict[str, float] = {}
    for step, at, detail in events:
        if step.startswith("z"):
            continue
        if step < "g":
            if step in ("a_inbox", "a_dispatch"):  # a start's path: one or the other
                last.clear()
            last[step] = at
        elif detail in by_id:
            run = by_id[detail]
            if step == "g_start_run" and step not in run:
                run.update(last)
            run.setdefault(step, at)


def _background(runs: list[dict[str, Any]], events: list[list[Any]]) -> list[str]:
    """Per kind of background work: passes inside the window, and runs they overlapped."""
    lines = []
    windows = [(run["p0"], run["handler"]) for run in runs if run.get("handler")]
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    for kind in ("zgc", "zscan", "zsweep"):
        starts = [at for step, at, _ in events if step == kind and lo <= at <= hi]
        ends = [at for step, at, _ in events if step == kind + "_end" and lo <= at <= hi]
        spans = list(zip(starts, ends, strict=False))
        hit = [(b - a) * 1000 for a, b in windows if any(s <= b and a <= e for s, e in spans)]
        rest = [(b - a) * 1000 for a, b in windows if not any(s <= b and a <= e for s, e in spans)]
        lines.append(
            f"{kind[1:]}: {len(spans)} passes, {len(hit)} runs overlapped "
            f"(p50 {harness.percentile(hit, 50) if hit else 0:.2f} ms), the others p50 "
            f"{harness.percentile(rest, 50):.2f} ms"
        )
    return lines


def report(result: dict[str, Any], events: list[list[Any]], label: str) -> None:
    """Print latency, worker CPU, the per-step table and the background overlaps."""
    runs = [run for run in result["runs"] if run.get("handler")]
    latencies = [(run["handler"] - run["p0"]) * 1000 for run in runs]
    print(
        f"{label} load {result['load'][0]:.2f}: {len(runs)} runs, p50 "
        f"{harness.percentile(latencies, 50):.2f} / p99 {harness.percentile(latencies, 99):.2f}"
        f" / max {max(latencies):.2f} ms; worker CPU {result['worker_cpu_us_per_run']:.0f} µs/run"
    )
    print(
        "run-queue wait µs/run, sleeps/run (main thread): "
        + ", ".join(
            f"{name} {wait:.0f} µs, {sleeps:.2f}"
            for name, (wait, sleeps) in result["sched_per_run"].items()
        )
    )
    if not events:
        return
    loops = {detail for step, _, detail in events if step == "zloop"}
    _attach_probe(runs, events)
    heading = f"step (worker loop: {','.join(loops)})"
    print(f"{heading:42s} {'p50 µs':>8s} {'p90':>8s} {'p99':>8s}")
    for name, start, end in STEPS:
        values = [(run[end] - run[start]) * 1e6 for run in runs if start in run and end in run]
        cells = [f"{harness.percentile(values, p):8.0f}" for p in (50, 90, 99)] if values else []
        print(f"{name:42s} {' '.join(cells)}")
    for line in _by_path(runs) + _registration_at_create(runs, events):
        print(line)
    for line in _background(runs, events):
        print(line)


def _registration_at_create(runs: list[dict[str, Any]], events: list[list[Any]]) -> list[str]:
    """Of the runs that took the wake path, how many were created while the worker had
    no registration it knew of (its hand-offs all consumed, or its claim made none), and
    how long before the create that happened."""
    left, gone_at, marks = 0, 0.0, []
    for step, at, detail in sorted(
        (event for event in events if event[0] in ("zreg", "a_inbox")), key=lambda e: e[1]
    ):
        left = int(detail) if step == "zreg" else max(0, left - 1)
        if left == 0:
            gone_at = at
        marks.append((at, left, gone_at))
    gone_ago: list[float] = []
    woken = [run for run in runs if "a_dispatch" in run]
    for run in woken:
        before = [mark for mark in marks if mark[0] <= run["p2"]]
        if before and before[-1][1] == 0:
            gone_ago.append((run["p2"] - before[-1][2]) * 1000)
    if not woken:
        return []
    return [
        f"wake path: {len(gone_ago)} of {len(woken)} created while no hand-off was left "
        f"(p50 {harness.percentile(gone_ago, 50):.2f} ms after the last was consumed)"
    ]


def _by_path(runs: list[dict[str, Any]]) -> list[str]:
    """Latency per path a start took: a hand-off (inbox row) or a wake and a claim. The
    tail of the whole is read here: which path its slowest runs took."""
    paths: dict[str, list[float]] = {}
    for run in runs:
        path = "hand-off" if "a_inbox" in run else "wake+claim" if "a_dispatch" in run else "?"
        paths.setdefault(path, []).append((run["handler"] - run["p0"]) * 1000)
    everything = sorted((run["handler"] - run["p0"]) * 1000 for run in runs)
    tail = everything[int(len(everything) * 0.99) - 1] if everything else 0.0
    lines = []
    for path, values in sorted(paths.items()):
        slow = sum(1 for value in values if value >= tail)
        lines.append(
            f"path {path}: {len(values)} runs, p50 {harness.percentile(values, 50):.2f} / p99 "
            f"{harness.percentile(values, 99):.2f} / max {max(values):.2f} ms; "
            f"{slow} of the whole's slowest 1 % (>= {tail:.2f} ms)"
        )
    return lines


def main() -> None:
    """Measure once and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--worker-cpu", default="", help="pin the worker to this core")
    parser.add_argument("--no-probe", action="store_true", help="latency and CPU only")
    parser.add_argument("--label", default="")
    parser.add_argument("--port", type=int, default=0, help="its redis-server's port (0: free)")
    parser.add_argument(
        "--hold-ms", type=float, default=0.0, help="each paced run's handler sleeps this long"
    )
    parser.add_argument("--dump", default="", help="write the runs and probe events here (JSON)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="latency-steps-") as tmp:
        probe_out = str(Path(tmp) / "probe.json")
        result = asyncio.run(_measure(args, probe_out))
        events = [] if args.no_probe else json.loads(Path(probe_out).read_text())
    report(result, events, args.label or os.getcwd())
    if args.dump:
        Path(args.dump).write_text(json.dumps({"result": result, "events": events}))


if __name__ == "__main__":
    main()
