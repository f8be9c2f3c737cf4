"""Instructions the API spends per run of ``POST /runs/batch``, counted by callgrind.

``python -m bench.batch_cost OUT [--batch 500] [--batches 4]`` starts a private
redis-server (not profiled), then a Python process under valgrind's callgrind
(instrumentation off) that builds the app, warms it with two batches and calls the
ASGI app directly (``bench.batch_cpu --direct``: no HTTP client in the process, no
uvicorn) for ``--batches`` batches of ``demo.echo`` runs with an idempotency key
each, every answer checked 201. Counting is on only around those requests, so the
figure is the app's own instructions per created run (its Redis client included,
the server not): exact whatever the machine's load, which CPU time on this shared
2-core machine is not. An A/B of two checkouts runs this file from each::

    cd <checkout> && PYTHONPATH=. .venv/bin/python <this checkout>/bench/batch_cost.py /tmp/a.out
    callgrind_annotate /tmp/a.out | head -40     # where they went (C level)

~50-100x slower than natively: 4 batches of 500 take a minute or two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from app.api.app import create_app
from app.settings import Settings
from app.startup import settle
from bench.batch_cpu import body, direct_post
from bench.harness import private_redis
from bench.redis_cost import callgrind_total


def _instrument(on: bool) -> None:
    """Turn callgrind's counting of this process on or off (a no-op outside valgrind)."""
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
        check=False,
        capture_output=True,
    )


async def child(url: str, batch: int, batches: int) -> None:
    """Inside valgrind: warm up, then post ``batches`` batches with counting on."""
    app = create_app(Settings(redis_url=url, handlers=["app.demo"]))
    settle()  # as `leasehold api` does before it serves: the start-up heap is frozen
    async with app.router.lifespan_context(app):
        payloads = [body(batch, f"c{i}-{time.time_ns()}") for i in range(batches + 2)]
        for i, payload in enumerate(payloads):
            if i == 2:
                _instrument(True)
            status, answer = await direct_post(app, payload)
            if status != 200 or answer.count(b'{"status":201,"run":{') != batch:
                raise RuntimeError(f"HTTP {status}: {answer[:300]!r}")
        _instrument(False)


async def main(args: argparse.Namespace, out_file: str) -> None:
    """Run the profiled child against a private Redis; print one JSON line."""
    async with private_redis("batch-cost") as redis:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_file}",
            sys.executable,
            "-m",
            "bench.batch_cost",
            args.out,
            "--child",
            redis.url,
            "--batch",
            str(args.batch),
            "--batches",
            str(args.batches),
        ]
        started = time.monotonic()
        profiled = await asyncio.create_subprocess_exec(*command, stderr=subprocess.DEVNULL)
        if await profiled.wait():
            raise RuntimeError(f"the profiled process failed ({profiled.returncode})")
    runs = args.batch * args.batches
    total = callgrind_total(out_file)
    result = {
        "tree": os.getcwd(),
        "batch": args.batch,
        "runs": runs,
        "instructions_per_run": round(total / runs),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="callgrind's profile file")
    parser.add_argument("--batch", type=int, default=500, help="runs per request")
    parser.add_argument("--batches", type=int, default=4, help="requests counted")
    parser.add_argument("--child", metavar="REDIS_URL", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    options = parse_args()
    if options.child:
        asyncio.run(child(options.child, options.batch, options.batches))
    else:
        asyncio.run(main(options, os.path.abspath(options.out)))
