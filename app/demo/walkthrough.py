"""``leasehold demo kill-worker``: the "kill a worker" story, scripted end to end.

It starts a private stack (embedded Redis without persistence, one API, two
workers, short leases), posts a long run, follows its events, ``kill -9``s the
worker that owns it and shows the stream ending in ``orphaned: executor lease
expired``. With ``--retry`` the run asks for ``on_lease_expired: "retry"`` and the
surviving worker takes it over and finishes it. Everything it starts is stopped
at the end, whatever happens.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import httpx

from app.client import Client
from app.embedded import EmbeddedRedis, free_port
from app.errors import LeaseholdError
from app.models import Run, RunStatus
from app.processes import Child, child_env, spawn, stop_all
from app.render import EventPrinter

READY_TIMEOUT_S = 30.0
CHILD_STOP_GRACE_S = 15.0
POLL_S = 0.1


class WalkthroughFailed(LeaseholdError):
    """The stack did not come up, or the story did not end the way it should."""


@contextmanager
def _stack(ttl_s: float) -> Iterator[tuple[str, dict[int, Child]]]:
    """Redis, an API and two workers on private ports; yields the API URL and workers."""
    with tempfile.TemporaryDirectory(prefix="leasehold-demo-") as tmp:
        redis = EmbeddedRedis(data_dir=Path(tmp), appendonly=False).start()
        port = free_port()
        env = child_env(
            {
                "LEASEHOLD_REDIS_URL": redis.url,
                "LEASEHOLD_LEASE_TTL_S": str(ttl_s),
                "LEASEHOLD_API_PORT": str(port),
                "LEASEHOLD_PREFIX": "demo",
                "LEASEHOLD_LOG_LEVEL": "WARNING",
            }
        )
        children: list[Child] = []

        def start(name: str, *args: str) -> Child:
            child = spawn(name, list(args), env=env, log_path=Path(tmp) / f"{name}.log")
            children.append(child)
            return child

        try:
            start("api", "api", "--port", str(port))
            workers = {
                child.pid: child
                for child in (start("worker-1", "worker"), start("worker-2", "worker"))
            }
            yield f"http://127.0.0.1:{port}", workers
        finally:
            stop_all(children, CHILD_STOP_GRACE_S)
            redis.stop()


def _until(probe: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except (LeaseholdError, OSError, httpx.TransportError):
            pass  # not up yet
        time.sleep(POLL_S)
    raise WalkthroughFailed(f"timed out waiting for {what}")


def kill_worker(*, retry: bool, ttl_s: float, out: TextIO) -> Run:
    """Run the story; returns the run as it ended. Raises WalkthroughFailed."""
    with _stack(ttl_s) as (url, workers), Client(url) as client:
        say = out.write
        _until(lambda: len(client.workers()) == 2, "the API and two workers")
        say(f"stack up: API {url}, workers {sorted(workers)}, lease TTL {ttl_s}s\n")
        seconds = 2 * ttl_s if retry else 600
        run = client.create(
            "demo.sleep",
            {"seconds": seconds, "progress_every_s": ttl_s / 2},
            on_lease_expired="retry" if retry else "orphan",
            max_attempts=2,
        )
        say(
            f"posted {run.id} (demo.sleep {seconds:g}s, on_lease_expired="
            f"{'retry' if retry else 'orphan'})\n"
        )
        printer = EventPrinter(out)
        events = client.events(run.id)
        for event in events:
            printer.show(event)
            if event.type == "claimed":
                owner = str(event.data["owner_id"])
                pid = int(owner.rsplit("-", 2)[1])
                say(f"-> kill -9 {pid} (the owner, {owner})\n")
                os.kill(pid, signal.SIGKILL)
                workers.pop(pid).wait(READY_TIMEOUT_S)
                break
        for event in events:
            printer.show(event)
        return _check(client.get(run.id), retry)


def _check(run: Run, retry: bool) -> Run:
    expected = RunStatus.SUCCEEDED if retry else RunStatus.ORPHANED
    if run.status != expected:
        raise WalkthroughFailed(f"the run ended {run.status.value}, expected {expected.value}")
    if not retry and (run.error is None or run.error.message != "orphaned: executor lease expired"):
        raise WalkthroughFailed(f"unexpected error on the orphaned run: {run.error}")
    return run
