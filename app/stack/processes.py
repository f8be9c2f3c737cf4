"""Child processes: ``python -m app.cli.launch`` with an env and a log, waited on for health.

One harness for every place that starts Leasehold as real processes: ``leasehold
up`` (:mod:`app.stack.stack`), ``leasehold demo kill-worker`` (:mod:`app.demo.walkthrough`),
the benchmarks (``bench/``), the process-level tests (``tests/support/processes.py``)
and the chaos soak (``tools/chaos/``). Each says what differs — the environment,
where the output goes, whether the child gets its own process group — and
nothing else.

A child in its own process group (``process_group=True``) does not get the
terminal's Ctrl-C: its parent decides which signal it gets, and when.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.errors import LeaseholdError
from app.httpx_import import httpx, verifies

# what the `leasehold` console script runs: every child behind a quiet collector (app.startup)
CLI_MODULE = "app.cli.launch"
HEALTH_POLL_S = 0.05
STOP_GRACE_S = 10.0


class ProcessNotReady(LeaseholdError):
    """A child process exited before it was ready, or never became ready; the message says which.

    Not :class:`app.errors.ChildFailed`, a child *run* that ended without succeeding.
    """


@dataclass
class Child:
    """One child process, its name, and the file its output goes to (``None``: inherited)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status, ``None`` while it runs (negative: killed by that signal)."""
        return self.popen.poll()

    def alive(self) -> bool:
        """Still running?"""
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send a real signal (a child that has already exited is not signalled)."""
        if self.alive():
            self.popen.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        """Wait for exit; returns the exit status. Raises ``subprocess.TimeoutExpired``."""
        return self.popen.wait(timeout=timeout_s)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM (a worker drains), then SIGKILL if it is still there after ``grace_s``."""
        stop_all([self], grace_s)

    def kill(self) -> None:
        """SIGKILL now, and reap it; SIGCONT first, in case someone paused it (SIGSTOP)."""
        if self.alive():
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
        self.popen.wait(timeout=10)

    def log(self) -> str:
        """Everything the child wrote to its log so far (empty when output is inherited)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")


def spawn(
    name: str,
    args: list[str],
    *,
    env: Mapping[str, str],
    log_path: Path | None = None,
    append: bool = False,
    module: str = CLI_MODULE,
    cwd: Path | None = None,
    process_group: bool = False,
) -> Child:
    """Start ``python -m <module> <args>`` with exactly ``env``.

    Output (stdout and stderr) goes to ``log_path`` (truncated, or appended to
    with ``append``), or is inherited when there is none. ``module`` is for
    harnesses that wrap the CLI (the chaos self-test's broken build).
    """
    command = [sys.executable, "-m", module, *args]
    if log_path is None:
        popen = subprocess.Popen(
            command, env=dict(env), cwd=cwd, process_group=_group(process_group)
        )
        return Child(name, popen)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as out:
        popen = subprocess.Popen(
            command,
            env=dict(env),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=_group(process_group),
        )
    return Child(name, popen, log_path)


def stop_all(children: Iterable[Child], grace_s: float = STOP_GRACE_S) -> list[Child]:
    """One SIGTERM each, then wait up to ``grace_s`` in all; SIGKILL the rest. Returns those.

    Exactly one SIGTERM: a second one cuts a worker's drain short.
    """
    children = list(children)
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    killed = []
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            killed.append(child)
    return killed


def _group(own: bool) -> int | None:
    return 0 if own else None


def child_env(*layers: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``layers`` on top, later ones winning."""
    env = dict(os.environ)
    for layer in layers:
        env.update(layer)
    return env


def wait_healthy(
    url: str,
    child: Child | None = None,
    *,
    timeout_s: float = 30.0,
    poll_s: float = HEALTH_POLL_S,
    stopped: Callable[[], bool] = lambda: False,
) -> bool:
    """Poll ``<url>/healthz`` until it answers 200; ``True`` then, ``False`` if ``stopped()`` first.

    Raises :class:`ProcessNotReady` when ``child`` exits first (its log in the
    message) or nothing answers within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    # one client for the whole wait, without a CA bundle for http: httpx.get() made a
    # client per poll, ~35 ms of CPU each, taken from the children starting beside us
    with httpx.Client(timeout=1, verify=verifies(url)) as client:
        while not stopped():
            if child is not None and not child.alive():
                raise ProcessNotReady(
                    f"{child.name} (pid {child.pid}) exited with status {child.returncode} "
                    f"before {url} answered{_tail(child)}"
                )
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return True
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ProcessNotReady(
                    f"{url}/healthz did not answer in {timeout_s:g}s{_tail(child)}"
                )
            time.sleep(poll_s)
    return False


def _tail(child: Child | None) -> str:
    log = child.log() if child is not None else ""
    return f":\n{log}" if log else ""
