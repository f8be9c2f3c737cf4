"""``leasehold up``: one command that starts the whole system on one machine.

Starts Redis (embedded, with AOF under ``state_dir``, unless LEASEHOLD_REDIS_URL
is set), writes its URL to ``state_dir/redis.url`` so that ``leasehold worker``
in another terminal finds it, then the API and N workers as child processes.
Ctrl-C (or SIGTERM) stops the children cleanly: workers drain, the API closes,
Redis flushes its AOF and exits. A child that dies unexpectedly is reported and
the rest keep running (killing a worker is part of the demo).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from app.embedded import EmbeddedRedis
from app.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 0.5
CHILD_STOP_GRACE_S = 10.0


class Supervisor:
    """Owns the child processes of ``leasehold up``."""

    def __init__(self, settings: Settings, *, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False

    def run(self) -> None:
        """Start everything and wait for Ctrl-C / SIGTERM."""
        embedded = None
        env = dict(os.environ)
        if not self.settings.redis_url:
            embedded = EmbeddedRedis(
                data_dir=self.settings.state_dir / "redis",
                port=self.settings.embedded_redis_port,
                log_file=(self.settings.state_dir / "redis.log").resolve(),
            )
            embedded.start()
            self.settings.embedded_redis_url_file.write_text(embedded.url + "\n")
            env["LEASEHOLD_REDIS_URL"] = embedded.url
            log.info("embedded redis on %s (AOF in %s)", embedded.url, embedded.data_dir)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            self._spawn("api", ["api"], env)
            for index in range(1, self.workers + 1):
                self._spawn(f"worker-{index}", ["worker"], env)
            log.info(
                "API on %s; %d workers; Ctrl-C stops everything",
                self.settings.client_api_url,
                self.workers,
            )
            self._watch()
        finally:
            self._stop_children()
            if embedded is not None:
                embedded.stop()
                self.settings.embedded_redis_url_file.unlink(missing_ok=True)

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        command = [sys.executable, "-m", "app.cli", *args]
        self.children[name] = subprocess.Popen(command, env=env)
        log.info("started %s (pid %d)", name, self.children[name].pid)

    def _watch(self) -> None:
        reported: set[str] = set()
        while not self._stopping:
            for name, child in self.children.items():
                if child.poll() is not None and name not in reported:
                    reported.add(name)
                    log.warning("%s (pid %d) exited with %s", name, child.pid, child.returncode)
            time.sleep(POLL_S)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _stop_children(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_timeout_s + CHILD_STOP_GRACE_S
        for child in self.children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
