"""``leasehold up``: one command that starts the whole system on one machine.

Starts Redis (embedded, with AOF under ``state_dir``, unless LEASEHOLD_REDIS_URL
is set), writes its URL to ``state_dir/redis.url`` so that ``leasehold worker``
in another terminal finds it, then the API and N workers as child processes,
and says "ready" once the API answers.

Stopping: Ctrl-C, SIGTERM or SIGHUP sends each child exactly one SIGTERM, the
workers first, so they drain (finish, then release what is left) while the API
still serves, then the API, then Redis stops; a second
signal is forwarded too, which cuts the workers' drain short. The children run
in their own process groups for this reason: a terminal's Ctrl-C reaches the
whole foreground group, and a worker that got it directly *and* from us would
skip its drain. The cost: if ``up`` itself is SIGKILLed, its children live on.

Failures: a port that is taken, a Redis that will not start, or an API that
exits stop everything with one clear line (exit 1). A worker that dies is
reported and the rest keep running: killing a worker is part of the demo.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import time
from pathlib import Path
from types import FrameType

import redis

from app.errors import LeaseholdError
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.stack.processes import Child, ProcessNotReady, child_env, spawn, stop_all, wait_healthy
from app.store.redis.connection import sync_client

log = logging.getLogger(__name__)
PRIVATE_FILE_MODE = 0o600

POLL_S = 0.1
CHILD_STOP_GRACE_S = 10.0
API_START_TIMEOUT_S = 60.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StackError(LeaseholdError):
    """``leasehold up`` cannot start, or the API it started has died."""


class Stack:
    """Owns the child processes of ``leasehold up``."""

    def __init__(self, settings: Settings, *, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.children: dict[str, Child] = {}
        self._signals = 0

    @property
    def stopping(self) -> bool:
        """A stop signal has arrived."""
        return self._signals > 0

    def run(self) -> None:
        """Start everything, wait for a stop signal, then stop everything.

        Raises :class:`StackError` (after stopping whatever was started) when
        the API port is taken, Redis cannot start, or the API exits.
        """
        self._check_api_port()
        # one INFO line per health probe would drown the children's output in the terminal
        logging.getLogger("httpx").setLevel(logging.WARNING)
        if not self.settings.redis_url:
            self._check_not_running_here()
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        embedded = None if self.settings.redis_url else self._start_redis()
        try:
            if self.stopping:
                return  # interrupted while Redis was starting
            # the children load what `up` checked: the demo's handlers included (see cli.up)
            env = child_env({"LEASEHOLD_HANDLERS": ",".join(self.settings.handlers)})
            if embedded is not None:
                env["LEASEHOLD_REDIS_URL"] = embedded.url
            # flags, not the environment: `up --port` must reach the API
            api_address = ["--host", self.settings.api_host, "--port", str(self.settings.api_port)]
            self._spawn("api", ["api", *api_address], env)
            for index in range(1, self.workers + 1):
                self._spawn(f"worker-{index}", ["worker"], env)
            self._wait_for_api()
            self._watch()
        finally:
            self._stop_children()
            if embedded is not None:
                embedded.stop()
                self.settings.embedded_redis_url_file.unlink(missing_ok=True)
            log.info("stopped")

    def _local_api_url(self) -> str:
        host = self.settings.api_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.settings.api_port}"

    def _check_api_port(self) -> None:
        """Refuse to start when the API could not listen: say so before starting anything."""
        host, port = self.settings.api_host, self.settings.api_port
        if port == 0:
            raise StackError("`leasehold up` needs a fixed API port: pass --port N")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # uvicorn sets SO_REUSEADDR too, so connections in TIME_WAIT do not count
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise StackError(
                    f"cannot listen on {host}:{port} ({exc.strerror}): is another API "
                    "running? Stop it, or pass --port N (or set LEASEHOLD_API_PORT)"
                ) from None

    def _check_not_running_here(self) -> None:
        """Two embedded Redis servers on one AOF directory would corrupt it."""
        url_file = self.settings.embedded_redis_url_file
        if not url_file.is_file():
            return
        url = url_file.read_text().strip()
        try:
            client = sync_client(url, socket_timeout_s=0.5, connect_timeout_s=0.5, retries=0)
        except ValueError:
            answering = False  # not a URL `up` wrote: nothing of ours runs there
        else:
            try:
                answering = bool(client.ping())
            except (redis.RedisError, OSError):
                answering = False  # left behind by an `up` that was killed: reuse the directory
            finally:
                client.close()
        if answering:
            raise StackError(
                f"`leasehold up` already runs from this directory (its Redis is at {url}); "
                f"stop it first, or run from another directory or LEASEHOLD_STATE_DIR"
            )

    def _start_redis(self) -> EmbeddedRedis:
        """Redis with a new random password, on the port this directory used last if free.

        Its URL (with the password) goes to ``state_dir/redis.url``, readable by this
        user only; the port is remembered in ``state_dir/redis.port``, so a worker
        started from another terminal finds it again after a restart of ``up``.
        """
        state_dir = self.settings.state_dir
        embedded = EmbeddedRedis(
            data_dir=state_dir / "redis",
            port=self.settings.embedded_redis_port or self._remembered_port(),
            log_file=(state_dir / "redis.log").resolve(),
            password=secrets.token_urlsafe(24),
        )
        try:
            embedded.start()
        except LeaseholdError as exc:
            embedded.stop()
            raise StackError(f"{exc} (its log: {embedded.log_file})") from None
        _write_private(self.settings.embedded_redis_url_file, embedded.url + "\n")
        self._port_file.write_text(f"{embedded.port}\n")
        log.info(
            "embedded %s on %s, password in %s (AOF in %s)",
            embedded.binary.describe() if embedded.binary else "redis-server",
            embedded.address,
            self.settings.embedded_redis_url_file,
            embedded.data_dir,
        )
        return embedded

    @property
    def _port_file(self) -> Path:
        return self.settings.state_dir / "redis.port"

    def _remembered_port(self) -> int:
        """The port the last embedded Redis of this directory used, if nobody holds it now."""
        try:
            port = int(self._port_file.read_text().strip())
        except (OSError, ValueError):
            return 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return 0  # taken (or not a port): pick a free one
        return port

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        # own process group: the terminal's Ctrl-C reaches only us (see the module docstring)
        self.children[name] = spawn(name, args, env=env, process_group=True)
        log.info("started %s (pid %d)", name, self.children[name].pid)

    def _wait_for_api(self) -> None:
        """Poll /healthz until the API answers; raises if it exits or never answers."""
        url = self._local_api_url()
        try:
            ready = wait_healthy(
                url,
                self.children["api"],
                timeout_s=API_START_TIMEOUT_S,
                poll_s=POLL_S,
                stopped=lambda: self.stopping,
            )
        except ProcessNotReady:
            self._check_api_alive()  # it exited: say so, in our words
            raise StackError(
                f"the API did not answer {url}/healthz in {API_START_TIMEOUT_S}s"
            ) from None
        if ready:
            log.info("ready: API on %s, %d workers; Ctrl-C stops everything", url, self.workers)

    def _check_api_alive(self) -> None:
        api = self.children["api"]
        if not api.alive():
            raise StackError(
                f"the API (pid {api.pid}) exited with status {api.returncode} (its error is "
                "above); stopped everything"
            )

    def _watch(self) -> None:
        """Until a stop signal: report workers that exit; raise if the API exits."""
        reported: set[str] = set()
        while not self.stopping:
            self._check_api_alive()
            for name, child in self.children.items():
                if not child.alive() and name not in reported:
                    reported.add(name)
                    log.warning("%s (pid %d) exited with %s", name, child.pid, child.returncode)
            time.sleep(POLL_S)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info(
                "stopping: workers drain for up to %.0fs; a second Ctrl-C cuts that short",
                self.settings.drain_timeout_s,
            )
        else:
            self._signal_children(signal.SIGTERM)

    def _signal_children(self, sig: signal.Signals) -> None:
        for child in self.children.values():
            child.signal(sig)

    def _stop_children(self) -> None:
        """Workers first (one SIGTERM each: they drain), then the API; SIGKILL past the grace.

        The API stops last so that clients following runs see the drain happen (each
        run finishing or being released) instead of a connection refused while
        workers still hold runs.
        """
        grace_s = self.settings.drain_timeout_s + CHILD_STOP_GRACE_S
        workers = [child for name, child in self.children.items() if name != "api"]
        api = [child for name, child in self.children.items() if name == "api"]
        for child in stop_all(workers, grace_s):
            log.warning("%s (pid %d) did not stop in time: killed it", child.name, child.pid)
        if api:
            log.info("workers stopped; stopping the API")
        for child in stop_all(api, CHILD_STOP_GRACE_S):
            log.warning("%s (pid %d) did not stop in time: killed it", child.name, child.pid)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by this user only (it holds a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(descriptor, PRIVATE_FILE_MODE)  # an older file keeps its mode through O_CREAT
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
