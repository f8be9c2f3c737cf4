"""The worker's Python per run, without Redis: claim reply → ``_start_run`` → finish → settled.

What ``bench.profile_worker`` cannot show on a shared 2-core machine: its CPU per run
moves by ±30 % with the load, and py-spy counts a worker waiting for its core as busy.
This drives the real :class:`~app.executor.worker.Worker` code (``LeaseStore._parse_claim``
on a claim reply of ``--batch`` ``demo.echo`` rows, ``Worker._start_run``, the run's task
to its ``Courier.finish``, the finish ARGV built and the answers decoded, each run
settled) in one process with a stand-in courier that answers every outcome OK, and
prints µs per run of each part over ``--rounds`` batches. The minimum is the figure
to compare (the load adds to the median, never takes from the minimum); ``--root``
runs another checkout's code (an A/B pair against a detached worktree of main).
Redis, the socket and redis-py's pipeline are not in it: they are the rest of the
worker's CPU per run (``bench.profile_worker --rate 0``).

It also prints the objects per run that only the cyclic collector frees (the collector
paused over ``--rounds`` more batches, then one ``gc.collect()``): the minimum leaves out
the rounds a GC pass lands in, and each object in a cycle is what makes those passes
come (BENCHMARKS.md, issue 19 aim 1: 12 per run until the run's helpers became its
task's own; 0 since).

    .venv/bin/python -m bench.run_path --rounds 3000
    .venv/bin/python -m bench.run_path --root /tmp/main    # the same, main's code
    .venv/bin/python -m bench.run_path --callgrind /tmp/rp.out --rounds 200

``--callgrind`` counts the instructions of the same rounds instead (valgrind, after 50
rounds to warm up; ~25-40 s): one JSON line with the instructions per run, the figure
that does not move with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PARTS = ("parse", "start+run", "finish", "total")


class AnswerAll:
    """A courier stand-in: keeps each outcome with its future until the batch is answered."""

    def __init__(self) -> None:
        self.batch: list[tuple[Any, asyncio.Future[Any]]] = []

    async def finish(self, outcome: Any) -> Any:
        """What ``Courier.finish`` does, minus the round trip."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.batch.append((outcome, future))
        return await future

    def kick(self) -> None:
        """A freed slot kicks the courier; nothing to claim here."""


def claim_reply(batch: int) -> list[Any]:
    """A ``claim_runs`` reply of ``batch`` first claims of ``demo.echo`` with ``{}`` input."""
    rows = [
        [f"01JD{i:022d}", "1", "demo.echo", "{}", "1", "3", "", "", "", "", "1764630000000", "", ""]
        for i in range(batch)
    ]
    return ["OK", rows, "-1", "0", "0", "0"]


class Bench:
    """The real worker's per-run code with a stand-in courier: one round is one batch."""

    def __init__(self, batch: int) -> None:
        from app.executor.context import HelperDeps
        from app.executor.execution import ExecutionDeps, RetryPolicy
        from app.executor.worker import Worker
        from app.handlers import load_handler_modules
        from app.settings import Settings
        from app.store.leases.bindings import FINISH_RUNS, FinishArgs
        from app.store.leases.store import LeaseStore
        from app.supervision.config import Supervision

        settings = Settings()
        worker = Worker(settings, load_handler_modules(["app.demo.handlers"]), worker_id="w-bench")
        self.courier = courier = AnswerAll()
        worker._couriers = {"default": courier}  # type: ignore[dict-item]
        none: Any = None  # the stores a no-op run never reaches
        helpers = HelperDeps(
            lease_store=none,
            stores=none,
            rate_limit_max_wait_ms=0,
            supervision=Supervision.from_settings(settings),
            max_event_bytes=settings.max_event_bytes,
            max_checkpoint_bytes=settings.max_checkpoint_bytes,
        )
        worker._deps = ExecutionDeps(
            helpers=helpers,
            courier_for=worker._couriers.__getitem__,
            thread_pool=ThreadPoolExecutor(1),
            retry=RetryPolicy(1.0, 2.0),
            on_slot_freed=worker._slot_freed,
            on_settled=worker._settled,
            run_gate=worker._slots.run_gate,
        )
        self.worker = worker
        self.batch = batch
        self.raw = claim_reply(batch)
        self.parse = LeaseStore._parse_claim
        self.finish_runs = FINISH_RUNS
        self.finish_args = FinishArgs

    async def round(self) -> tuple[int, int, int, int]:
        """One batch claimed, run, finished and settled: perf_counter_ns at each step."""
        worker, courier, batch = self.worker, self.courier, self.batch
        t0 = time.perf_counter_ns()
        claim = self.parse(None, "default", "w-bench", self.raw)
        t1 = time.perf_counter_ns()
        for run in claim.runs:
            worker._start_run(run, 0.0)
        for _ in range(3):  # each run's task to its finish
            await asyncio.sleep(0)
        t2 = time.perf_counter_ns()
        answered, courier.batch = courier.batch, []
        if len(answered) != batch:
            raise RuntimeError(f"{len(answered)} of {batch} runs reached their finish")
        groups = [outcome.group() for outcome, _ in answered]
        self.finish_runs.flatten(self.finish_args("w-bench", "", 1000, "wake", groups))
        codes = self.finish_runs.decode(["OK"] * batch)
        for (_, future), code in zip(answered, codes, strict=True):
            future.set_result(code)
        for _ in range(3):  # each task settles
            await asyncio.sleep(0)
        t3 = time.perf_counter_ns()
        if worker._executions:
            raise RuntimeError(f"{len(worker._executions)} runs did not settle")
        return t0, t1, t2, t3


async def measure(batch: int, rounds: int) -> dict[str, list[float]]:
    """µs per run of each part, one sample per round (batch)."""
    bench = Bench(batch)
    samples: dict[str, list[float]] = {part: [] for part in PARTS}
    for _ in range(rounds):
        t0, t1, t2, t3 = await bench.round()
        for part, ns in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
            samples[part].append(ns / batch / 1000)
    return samples


async def counted(batch: int, rounds: int) -> None:
    """Inside valgrind: 50 rounds to warm up, then ``rounds`` with counting on."""
    from bench.batch_cost import _instrument

    bench = Bench(batch)
    for _ in range(50):
        await bench.round()
    gc.collect()
    _instrument(True)
    for _ in range(rounds):
        await bench.round()
    _instrument(False)


def callgrind(args: argparse.Namespace) -> None:
    """This file's ``--child`` under callgrind: instructions per run, as one JSON line."""
    out_file = os.path.abspath(args.callgrind)
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    command = [*valgrind, f"--callgrind-out-file={out_file}", sys.executable, "-c"]
    command += [Path(__file__).read_text(), "--child"]
    command += ["--batch", str(args.batch), "--rounds", str(args.rounds)]
    started = time.monotonic()
    subprocess.run(command, cwd=args.root or Path.cwd(), check=True, stderr=subprocess.DEVNULL)
    from bench.redis_cost import callgrind_total

    runs = args.batch * args.rounds
    result = {
        "tree": str(args.root or Path.cwd()),
        "batch": args.batch,
        "runs": runs,
        "instructions_per_run": round(callgrind_total(out_file) / runs),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))


async def cyclic_garbage(batch: int, rounds: int) -> float:
    """Objects per run left in reference cycles: collector paused, ``rounds`` batches, one
    collection (what it finds unreachable)."""
    gc.collect()
    gc.disable()
    try:
        await measure(batch, rounds)
        return gc.collect() / (batch * rounds)
    finally:
        gc.enable()


def main(argv: list[str] | None = None) -> None:
    """Print min / p10 / median µs per run of each part (or re-run under ``--root``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.run_path", description=__doc__)
    parser.add_argument("--batch", type=int, default=25, help="runs per claim (a trip's share)")
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--root", type=Path, help="run this checkout's code instead")
    parser.add_argument(
        "--callgrind",
        metavar="OUT",
        help="count instructions instead (valgrind; its profile to OUT): --rounds after 50 "
        "to warm up, printed as instructions per run (load-independent; try --rounds 200)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, ".")
        import uvloop

        uvloop.run(counted(args.batch, args.rounds))
        return
    if args.callgrind is not None:
        callgrind(args)
        return
    if args.root is not None:
        here = Path(__file__).read_text()
        command = [sys.executable, "-c", here, "--batch", str(args.batch)]
        command += ["--rounds", str(args.rounds)]
        subprocess.run(command, cwd=args.root, env=None, check=True)
        return
    sys.path.insert(0, ".")  # under --root: that checkout's ``app``
    import uvloop

    samples = uvloop.run(measure(args.batch, args.rounds))
    garbage = uvloop.run(cyclic_garbage(args.batch, min(args.rounds, 200)))
    root = Path.cwd().name
    for part in PARTS:
        values = sorted(samples[part])
        print(
            f"{root}: {part:10s} min {values[0]:6.2f}  p10 {values[len(values) // 10]:6.2f}"
            f"  median {values[len(values) // 2]:6.2f} us/run"
        )
    print(f"{root}: objects per run only the cyclic collector frees: {garbage:.2f}")


if __name__ == "__main__":
    main()
