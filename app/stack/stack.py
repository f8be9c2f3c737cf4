"""``leasehold up``: one command that starts the whole system on one machine.

Starts Redis (embedded, with AOF under ``state_dir``, unless LEASEHOLD_REDIS_URL
is set), writes its address book ``state_dir/stack.json`` (the API's URL, Redis's,
and the settings it hands its children: :mod:`app.stack.address_book`) so that
``leasehold submit`` or a replica ``leasehold worker`` in another terminal finds the
same stack, then the API and N workers as child processes, and says "ready" once the
API answers.

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

from app.errors import LeaseholdError
from app.redaction import redacted
from app.settings import Settings
from app.stack.address_book import (
    AddressBook,
    UnusableBook,
    read_book,
    remove_book,
    stack_settings,
    write_book,
)
from app.stack.embedded import EmbeddedRedis
from app.stack.processes import Child, ProcessNotReady, child_env, spawn, stop_all, wait_healthy

log = logging.getLogger(__name__)

POLL_S = 0.1
CHILD_STOP_GRACE_S = 10.0
API_START_TIMEOUT_S = 60.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StackError(LeaseholdError):
    """``leasehold up`` cannot start, or the API it started has died."""


class Stack:
    """Owns the child processes of ``leasehold up``."""

    def __init__(self, settings: Settings, *, workers: int, access_log: bool = False) -> None:
        self.settings = settings
        self.workers = workers
        # the API's access log in this terminal (up --access-log): off, a console polling
        # every second would drown the workers' lines
        self.access_log = access_log
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
        self._check_not_running_here()
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        embedded = None if self.settings.redis_url else self._start_redis()
        book: AddressBook | None = None
        try:
            if self.stopping:
                return  # interrupted while Redis was starting
            url = embedded.url if embedded is not None else self.settings.resolved_redis_url()
            book = self._write_book(url)
            # the children are told what the book says (it is what they were started with):
            # the demo's handlers included (see cli.up), the app dir, Redis, the API's URL
            env = child_env(book.settings)
            # flags, not the environment: `up --port` must reach the API
            api_address = ["--host", self.settings.api_host, "--port", str(self.settings.api_port)]
            access = {"LEASEHOLD_API_ACCESS_LOG": "true" if self.access_log else "false"}
            self._spawn("api", ["api", *api_address], {**env, **access})
            for index in range(1, self.workers + 1):
                self._spawn(f"worker-{index}", ["worker"], env)
            self._wait_for_api()
            self._watch()
        finally:
            self._stop_children()
            if book is not None:
                remove_book(book.path)
            if embedded is not None:
                embedded.stop()
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
        """Refuse when this directory's book belongs to an ``up`` that still runs.

        Two embedded Redis servers on one AOF directory would corrupt it, so a book
        whose embedded Redis answers means "running" even if its ``up`` was killed
        (its children live on). A book that cannot be read is replaced, with a word.
        """
        path = self.settings.stack_file
        try:
            book = read_book(path)
        except UnusableBook as exc:
            log.warning("replacing %s: %s", path, exc)
            return
        if book is None or not book.redis_answers():
            return  # none, or left behind by an `up` that was killed with its Redis
        if book.embedded_redis or book.up_alive():
            raise StackError(
                f"`leasehold up` already runs from this directory (pid {book.pid}, its Redis "
                f"at {redacted(book.redis_url)}); stop it first, or run from another "
                "directory or LEASEHOLD_STATE_DIR"
            )

    def _write_book(self, redis_url: str) -> AddressBook:
        """The address book, written before any child starts (they are given its settings)."""
        api_url = self._local_api_url()
        book = write_book(
            self.settings.stack_file,
            pid=os.getpid(),
            directory=Path.cwd(),
            embedded_redis=not self.settings.redis_url,
            settings=stack_settings(self.settings, redis_url=redis_url, api_url=api_url),
        )
        log.info(
            "address book %s: API %s, Redis %s, app dir %s",
            book.path,
            api_url,
            redacted(redis_url),
            book.settings["LEASEHOLD_APP_DIR"],
        )
        return book

    def _start_redis(self) -> EmbeddedRedis:
        """Redis with a new random password, on the port this directory used last if free.

        Its URL (with the password) goes to the address book, readable by this user
        only; the port is remembered in ``state_dir/redis.port``, so a worker started
        from another terminal finds it again after a restart of ``up``.
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
        self._port_file.write_text(f"{embedded.port}\n")
        log.info(
            "embedded %s on %s, password in %s (AOF in %s)",
            embedded.binary.describe() if embedded.binary else "redis-server",
            embedded.address,
            self.settings.stack_file,
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
