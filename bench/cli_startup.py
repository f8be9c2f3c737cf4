"""How long the ``leasehold`` CLI takes to start: the cost of every ``runs get`` in a loop.

``python -m bench.cli_startup [--reps 15] [--root DIR]`` runs each command ``--reps``
times (hyperfine-style: one warm-up, then repeated wall-clock timings of a fresh
process) and prints min / median / max in ms. The commands are ``leasehold --help``,
``leasehold runs get ID --help``, ``leasehold runs get ID`` against an address
nobody listens on (so the time is start-up plus one refused connection, not the
API's), and ``runs get ID`` (and ``--json``) answered by a stub in this process
that sends every answer the same run, with every field kind set, as the API writes
it (so the time is the client's: start-up, the request, reading and printing the
run), each as ``python -m app.cli.launch`` (what the ``leasehold`` script runs).
``--root DIR`` runs another checkout (e.g. a ``git worktree`` of an older commit)
with this interpreter, to measure before and after a change; given more than once,
the roots alternate repetition by repetition.

Where the time goes: ``python -X importtime -m app.cli --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.stack.embedded import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent


def commands(answering_url: str) -> dict[str, list[str]]:
    """What a person or a shell loop runs; one API address refuses at once."""
    nobody = f"http://127.0.0.1:{free_port()}"
    return {
        "--help": ["--help"],
        "runs get --help": ["runs", "get", "--help"],
        "runs get (refused)": ["runs", "get", "default.X", "--api-url", nobody],
        "runs get (answered)": ["runs", "get", RUN_ID, "--api-url", answering_url],
        "runs get --json": ["runs", "get", RUN_ID, "--json", "--api-url", answering_url],
    }


RUN_ID = "default.01JDX3V7ZQ8M4N6P2R5T9W1Y3A"


def answered_run() -> bytes:
    """A failed retry of a run, every field kind set, as ``GET /runs/{id}`` writes it."""
    from app.models import Run

    times = {
        name: f"2026-12-02T05:{minute:02d}:07.123456Z"
        for minute, name in enumerate(
            ["created_at", "started_at", "first_started_at", "finished_at", "fire_at"]
        )
    }
    run = Run.model_validate(
        {
            "id": RUN_ID,
            "queue": "default",
            "handler": "demo.agent",
            "status": "failed",
            "input": {"prompt": "summarise the report", "max_tokens": 512, "t": 0.7},
            "output": {"partial": ["a", "b"], "tokens": 311, "cost": 1.5e-05},
            "error": {
                "code": "idle_timeout",
                "message": "no progress for 30 s",
                "retryable": False,
                "details": {"owner_id": "w-1", "fence": 4, "since_progress_s": 30.2},
            },
            "attempt": 2,
            "max_attempts": 3,
            "on_lease_expired": "retry",
            "fence": 4,
            "lease_ttl_ms": 30000,
            "idempotency_key": "report-2026-12-02",
            "metadata": {"team": "research", "ticket": "R-1432"},
            "last_event_id": "1764651600123-0",
            "retention_s": 86400,
            "schedule_id": "nightly",
            "retry_of": "default.01JDX3T0000000000000000000",
            "concurrency_key": "tenant-7",
            "priority": 2,
            "root_id": RUN_ID,
            **times,
        }
    )
    return json.dumps(run.model_dump(mode="json"), ensure_ascii=False).encode()


@contextmanager
def answering_api() -> Iterator[str]:
    """A loopback stub that answers every request with :func:`answered_run`; its URL."""
    body = answered_run()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    stub = StubApi(head % len(body) + body)
    try:
        yield stub.url
    finally:
        stub.close()


class StubApi:
    """A one-thread loopback HTTP server: reads each request's head, sends ``reply``."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(self.reply)

    def close(self) -> None:
        """Stop accepting (the thread ends at its next accept)."""
        self._listener.close()


def time_ms(args: list[str], root: Path) -> tuple[float, float]:
    """Wall-clock and CPU (user + sys) ms of one fresh ``python -m app.cli <args>``.

    CPU time is the steadier figure on a shared machine: waiting for a core is not in it.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    env["PYTHONPATH"] = str(root)
    started = time.perf_counter()
    # what the `leasehold` script runs (app.cli.launch; app.launch in a checkout from before
    # app/cli/), or app.cli in a checkout from before the script
    if (root / "app" / "cli" / "launch.py").exists():
        module = "app.cli.launch"
    elif (root / "app" / "launch.py").exists():
        module = "app.launch"
    else:
        module = "app.cli"
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
    with answering_api() as url:
        for name, args in commands(url).items():
            _time_command(name, args, roots, options.reps)


def _time_command(name: str, args: list[str], roots: list[Path], reps: int) -> None:
    """Time one command from every root, alternated; print a line per root."""
    for root in roots:
        time_ms(args, root)  # warm-up: page cache, .pyc files
    runs: dict[Path, list[tuple[float, float]]] = {root: [] for root in roots}
    for _ in range(reps):
        for root in roots:
            runs[root].append(time_ms(args, root))
    for root, timed in runs.items():
        wall = [wall_ms for wall_ms, _ in timed]
        cpu = [cpu_ms for _, cpu_ms in timed]
        print(
            f"{name:<20} wall min {min(wall):5.0f} median {statistics.median(wall):5.0f} ms;"
            f" cpu min {min(cpu):5.0f} median {statistics.median(cpu):5.0f} ms"
            f"  (n={reps}, {root})"
        )


if __name__ == "__main__":
    main()
