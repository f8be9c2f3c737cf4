"""Where one worker's Python time goes per run: py-spy on a worker draining N no-op runs.

The method of BENCHMARKS.md's per-process section, as one command, so a profile
can be reproduced and compared before/after:

* the benchmark's own redis-server; N ``demo.echo`` runs created first through
  ``RunStore.create`` (as ``bench.throughput --modes store`` does);
* ONE ``leasehold worker --concurrency 50`` subprocess, with ``py-spy record
  --nonblocking -f raw`` attached to it by pid as soon as it is spawned;
* when no run is left, py-spy is stopped (SIGINT: it writes its file) and then
  the worker (SIGTERM), each by its own pid.

The raw profile (collapsed stacks) is kept in ``bench/out/``; the report prints
the worker's CPU µs per run (from /proc, start-up included, and **steady**: the
CPU between the moment a tenth of the runs are done and the end, over the runs
done in between, so start-up's ~0.5 s does not hide a few µs per run), the share of
start-up (any stack under an import), and the top frames of the rest by
inclusive and by self share of samples. py-spy's sampling competes for the 2
cores: for CPU figures, ``--rate 0`` (no profile).

    .venv/bin/python -m bench.profile_worker --n 20000
    .venv/bin/python -m bench.profile_worker --n 20000 --rate 0 --root /tmp/main  # A/B side
    .venv/bin/python -m bench.profile_worker --raw bench/out/profile-....txt   # report only
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.harness import Bench, log

CREATE_CONCURRENCY = 50  # creates in flight: the store producer's calls, overlapped
DEADLINE_S = 600.0
POLL_S = 0.05
FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")
STARTUP_MARKERS = ("_find_and_load",)


def _py_spy() -> str:
    """py-spy next to this interpreter (the venv), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    return found


def _start_spy(rate: int, out: Path, pid: int) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` into ``out`` (raw collapsed stacks) until it gets SIGINT."""
    command = [_py_spy(), "record", "--rate", str(rate), "--nonblocking", "-f", "raw"]
    return subprocess.Popen(
        [*command, "-o", str(out), "--pid", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _process_cpu_s(pid: int) -> float:
    """User + system CPU of a live process (py-spy, our other child, is not in it)."""
    return sum(_process_user_sys_s(pid))


def _process_user_sys_s(pid: int) -> tuple[float, float]:
    """User and system CPU of a live process, apart: system is mostly its socket calls."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _frame_name(frame: str) -> str:
    """``fn (path/to/file.py:123)`` -> ``file.py:fn`` (lines merged: one name per function)."""
    match = FRAME.match(frame)
    if match is None:
        return frame
    return f"{Path(match['file']).name}:{match['fn']}"


def parse_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw format: one ``frame;frame;... count`` line per distinct stack."""
    stacks = []
    for line in path.read_text().splitlines():
        head, _, count = line.rpartition(" ")
        if head and count.isdigit():
            stacks.append(([_frame_name(f) for f in head.split(";")], int(count)))
    return stacks


def report(path: Path, top: int) -> None:
    """Print start-up share, then top frames by inclusive and self share of the rest."""
    stacks = parse_raw(path)
    total = sum(count for _, count in stacks)
    startup = sum(c for s, c in stacks if any(m in f for f in s for m in STARTUP_MARKERS))
    rest = [(s, c) for s, c in stacks if not any(m in f for f in s for m in STARTUP_MARKERS)]
    busy = sum(c for _, c in rest) or 1
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for frames, count in rest:
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    print(f"{path}: {total} samples, start-up (imports) {100 * startup / max(total, 1):.1f} %")
    print(f"shares below are of the {busy} samples outside start-up")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"\n-- top {top} by {title} --")
        for name, count in counter.most_common(top):
            print(f"{100 * count / busy:6.1f} %  {name}")


async def _create(bench: Bench, n: int) -> None:
    """N ``demo.echo`` runs, ``CREATE_CONCURRENCY`` creates in flight."""
    for start in range(0, n, CREATE_CONCURRENCY):
        size = min(CREATE_CONCURRENCY, n - start)
        await asyncio.gather(
            *(bench.store.create(NewRun(handler="demo.echo", input={})) for _ in range(size))
        )


async def profile(args: argparse.Namespace) -> Path:
    """Create the runs, profile one worker until none is left; returns the raw file."""
    out = harness.OUT_DIR / f"profile-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    async with harness.private_redis("profile", args.port) as redis_server:
        settings = Settings(redis_url=redis_server.url)
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        await _create(bench, args.n)
        load = harness.load_average()[0]
        log(f"created {args.n}; starting the worker (load {load:.2f})")
        worker_args = ["worker", "--concurrency", str(args.concurrency)]
        t0 = time.perf_counter()
        worker = harness.spawn("worker-profile", worker_args, bench.env(), root=args.root)
        spy = _start_spy(args.rate, out, worker.pid) if args.rate > 0 else None
        steady_from: tuple[float, int] | None = None  # (worker CPU s, runs left) then
        try:
            while (left := await bench.unfinished()) and time.perf_counter() - t0 < DEADLINE_S:
                if not worker.alive():
                    raise RuntimeError(f"worker exited with {worker.returncode}")
                if steady_from is None and left <= args.n * 0.9:
                    steady_from = (_process_cpu_s(worker.pid), left)
                await asyncio.sleep(POLL_S)
            elapsed = time.perf_counter() - t0
            user_s, sys_s = _process_user_sys_s(worker.pid)
            cpu_s = user_s + sys_s
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            harness.stop(worker)
    steady = ""
    if steady_from is not None and steady_from[1] > 0:
        steady = f", steady {(cpu_s - steady_from[0]) / steady_from[1] * 1e6:.1f} us/run"
    log(
        f"{args.root.name}: {args.n} runs in {elapsed:.2f}s ({args.n / elapsed:.0f}/s, "
        f"load {load:.2f}); worker CPU {cpu_s / args.n * 1e6:.1f} us/run (start-up "
        f"included; {100 * sys_s / max(cpu_s, 1e-9):.0f} % system){steady}"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    """Profile a worker (or re-read a raw profile) and print where its time goes."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__)
    parser.add_argument("--n", type=int, default=20000, help="no-op runs to drain")
    parser.add_argument(
        "--rate",
        type=int,
        default=1000,
        help="py-spy samples per second (0: no profile, only the CPU and rate figures)",
    )
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--port", type=int, default=0, help="the redis-server's port (0: a free one)"
    )
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--raw", type=Path, help="report on this raw profile instead")
    parser.add_argument(
        "--root",
        type=Path,
        default=harness.REPO_ROOT,
        help="the checkout whose worker runs (e.g. a detached worktree of main), this venv",
    )
    args = parser.parse_args(argv)
    path = args.raw or asyncio.run(profile(args))
    if args.raw or args.rate > 0:
        report(path, args.top)


if __name__ == "__main__":
    main()
