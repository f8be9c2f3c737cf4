"""How long ``leasehold up`` (the README's quick start) takes until its API is healthy.

``python -m bench.up_startup [--reps 10] [--root DIR ...]`` starts ``leasehold up
--port P --workers 2`` (``python -m app.cli.launch``, what the console script runs) in a
fresh state directory (its own embedded Redis, AOF and all), polls ``GET /healthz``
every 5 ms with a bare ``http.client`` (nothing of the harness's own start-up in the
window), and records spawn -> first 200 and spawn -> the second worker registered
(``up`` reports ready at the first; the quick start's first run needs the second). It
then stops the stack with SIGINT, as Ctrl-C does. Several ``--root`` (checkouts, e.g.
a ``git worktree`` of an older commit) alternate repetition by repetition, so a change
of the shared machine's load hits each alike; each is compiled to bytecode first.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.stack.embedded import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.005
TIMEOUT_S = 120.0
WORKERS = 2


def healthy(port: int) -> bool:
    """Whether the API on ``port`` answers /healthz with 200."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def workers_seen(port: int) -> int:
    """How many workers the API lists (``GET /workers``); 0 while it cannot say."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/workers")
        response = connection.getresponse()
        return response.read().count(b'"pid"') if response.status == 200 else 0
    except OSError:
        return 0
    finally:
        connection.close()


def one_up(root: Path) -> tuple[float, float]:
    """Spawn -> healthy and spawn -> every worker listed, in ms, for one ``up`` of ``root``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-up-") as state_dir:
        env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
        env |= {"PYTHONPATH": str(root), "LEASEHOLD_STATE_DIR": state_dir}
        started = time.perf_counter()
        command = [sys.executable, "-m", "app.cli.launch", "up", "--port", str(port)]
        child = subprocess.Popen(
            [*command, "--workers", str(WORKERS)],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ready_ms = _until(lambda: healthy(port), child, started)
            listed_ms = _until(lambda: workers_seen(port) >= WORKERS, child, started)
            return ready_ms, listed_ms
        finally:
            child.send_signal(signal.SIGINT)
            child.wait(timeout=TIMEOUT_S)


def _until(done: Callable[[], bool], child: subprocess.Popen[bytes], started: float) -> float:
    """Poll ``done()`` until true; ms since ``started``. Raises if ``up`` exits or stalls."""
    while time.perf_counter() - started < TIMEOUT_S:
        if done():
            return (time.perf_counter() - started) * 1000
        if child.poll() is not None:
            raise RuntimeError(f"leasehold up exited with status {child.returncode}")
        time.sleep(POLL_S)
    raise RuntimeError(f"not ready within {TIMEOUT_S} s")


def summary(values: list[float]) -> str:
    """min / median / max, in ms."""
    return f"min {min(values):5.0f} median {statistics.median(values):5.0f} max {max(values):5.0f}"


def main() -> None:
    """Print, per root, spawn -> healthy and spawn -> workers listed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--root", type=Path, action="append", help="repeatable; default: here")
    options = parser.parse_args()
    roots: list[Path] = options.root or [REPO_ROOT]
    for root in roots:
        compileall.compile_dir(root / "app", quiet=1)
    results: dict[Path, list[tuple[float, float]]] = {root: [] for root in roots}
    print(f"load average at start {os.getloadavg()}")
    for rep in range(options.reps + 1):
        for root in roots:
            timed = one_up(root)
            if rep:  # the first is a warm-up: page cache
                results[root].append(timed)
    print(f"load average at end {os.getloadavg()}")
    for root, timed in results.items():
        print(f"{root}, n={options.reps}:")
        print(f"  spawn -> healthy         {summary([ready for ready, _ in timed])} ms")
        print(f"  spawn -> workers listed  {summary([listed for _, listed in timed])} ms")


if __name__ == "__main__":
    main()
