"""How long the ``leasehold`` CLI takes to start: the cost of every ``runs get`` in a loop.

``python -m bench.cli_startup [--reps 15] [--root DIR]`` runs each command ``--reps``
times (hyperfine-style: one warm-up, then repeated wall-clock timings of a fresh
process) and prints min / median / max in ms. The commands are ``leasehold --help``,
``leasehold runs get ID --help`` and ``leasehold runs get ID`` against an address
nobody listens on (so the time is start-up plus one refused connection, not the
API's), each as ``python -m app.launch`` (what the ``leasehold`` script runs).
``--root DIR`` runs another checkout (e.g. a ``git worktree`` of an older commit)
with this interpreter, to measure before and after a change; given more than once,
the roots alternate repetition by repetition.

Where the time goes: ``python -X importtime -m app.cli --help``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from app.embedded import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent


def commands() -> dict[str, list[str]]:
    """What a person or a shell loop runs; the API address refuses at once."""
    nobody = f"http://127.0.0.1:{free_port()}"
    return {
        "--help": ["--help"],
        "runs get --help": ["runs", "get", "--help"],
        "runs get (refused)": ["runs", "get", "default.X", "--api-url", nobody],
    }


def time_ms(args: list[str], root: Path) -> tuple[float, float]:
    """Wall-clock and CPU (user + sys) ms of one fresh ``python -m app.cli <args>``.

    CPU time is the steadier figure on a shared machine: waiting for a core is not in it.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    env["PYTHONPATH"] = str(root)
    started = time.perf_counter()
    # what the `leasehold` script runs (app.launch), or app.cli in a checkout from before it
    module = "app.launch" if (root / "app" / "launch.py").exists() else "app.cli"
    child = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # reaped by wait4: keep Popen from waiting again
    wall_ms = (time.perf_counter() - started) * 1000
    return wall_ms, (usage.ru_utime + usage.ru_stime) * 1000


def main() -> None:
    """Print one line per command and root: min, median, max over the repetitions.

    Several ``--root`` are timed in turn, repetition by repetition (A, B, A, B...), so a
    change of the shared machine's load hits each alike.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--root", type=Path, action="append", help="repeatable; default: here")
    options = parser.parse_args()
    roots: list[Path] = options.root or [REPO_ROOT]
    for name, args in commands().items():
        for root in roots:
            time_ms(args, root)  # warm-up: page cache, .pyc files
        runs: dict[Path, list[tuple[float, float]]] = {root: [] for root in roots}
        for _ in range(options.reps):
            for root in roots:
                runs[root].append(time_ms(args, root))
        for root, timed in runs.items():
            wall = [wall_ms for wall_ms, _ in timed]
            cpu = [cpu_ms for _, cpu_ms in timed]
            print(
                f"{name:<20} wall min {min(wall):5.0f} median {statistics.median(wall):5.0f} ms;"
                f" cpu min {min(cpu):5.0f} median {statistics.median(cpu):5.0f} ms"
                f"  (n={options.reps}, {root})"
            )


if __name__ == "__main__":
    main()
