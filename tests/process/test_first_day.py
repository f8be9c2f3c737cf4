"""The first day with your own code: your handler package found, one address for everything.

Commands run as the ``leasehold`` console script runs them: ``python -P`` keeps the
working directory off ``sys.path`` (``python -m`` alone would put it there and hide
the very bug the app dir fixes), from a project directory holding ``mypkg/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.models import Run, RunStatus
from app.stack.address_book import API_URL, REDIS_URL, write_book
from app.stack.embedded import free_port
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import HEALTHY_TIMEOUT_S, Processes, env_without_settings

CLI_TIMEOUT_S = 60.0
STOP_S = 30.0
# the README's "Write a handler" example
GREET = """from pydantic import BaseModel

from app.executor import RunContext, handler


class Greeting(BaseModel):
    name: str


@handler("greet")
async def greet(ctx: RunContext, params: Greeting) -> dict[str, str]:
    return {"text": f"hello {params.name}"}
"""


def console_script(*args: str) -> list[str]:
    """``leasehold <args>`` as the installed script runs: the working directory not on sys.path."""
    return [sys.executable, "-P", "-m", "app.cli.launch", *args]


def leasehold(
    *args: str, cwd: Path, timeout_s: float = CLI_TIMEOUT_S, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        console_script(*args),
        cwd=cwd,
        env=env_without_settings(**env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


class Started:
    """Long-running commands of one test, logged to files, all killed at teardown."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.popens: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str, cwd: Path, **env: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{args[0]}-{len(self.popens)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                console_script(*args),
                cwd=cwd,
                env=env_without_settings(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.popens.append((popen, log))
        return popen

    def log(self, popen: subprocess.Popen[bytes]) -> str:
        return next(log for started, log in self.popens if started is popen).read_text()

    async def wait_for(self, popen: subprocess.Popen[bytes], text: str) -> None:
        async def logged() -> str:
            if popen.poll() is not None:
                raise AssertionError(f"exited with {popen.returncode}:\n{self.log(popen)}")
            return self.log(popen)

        await eventually(logged, until=lambda log: text in log, what=f"{text!r} in the log")

    def reap(self) -> None:
        """SIGTERM first: `up` then stops the children it started in process groups of
        their own (a SIGKILL of `up` would leave them running); SIGKILL what is left."""
        for popen, _ in self.popens:
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        for popen, _ in self.popens:
            try:
                popen.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=10)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Started(logs)
    yield processes
    processes.reap()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with the README's handler package, mypkg/handlers.py."""
    root = tmp_path / "project"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "handlers.py").write_text(GREET)
    (root / "mypkg" / "broken.py").write_text("import leasehold_test_not_installed  # noqa\n")
    return root


async def test_a_worker_finds_the_handler_package_in_its_directory(
    project: Path, started: Started, redis_url: str, prefix: str
) -> None:
    env = {"LEASEHOLD_REDIS_URL": redis_url, "LEASEHOLD_PREFIX": prefix}
    worker = started.start("worker", cwd=project, LEASEHOLD_HANDLERS="mypkg.handlers", **env)
    await started.wait_for(worker, "serving queues default")
    # the process says which Redis and API it uses, the password masked (none here)
    assert f"Redis {redis_url} (LEASEHOLD_REDIS_URL), API http://127.0.0.1:8000" in (
        started.log(worker)
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=STOP_S) == 0
    elsewhere = started.start(
        "worker", "--app-dir", str(project), cwd=project.parent,
        LEASEHOLD_HANDLERS="mypkg.handlers", **env,
    )  # fmt: skip
    await started.wait_for(elsewhere, "serving queues default")


@pytest.mark.parametrize("where", ["empty", "non-ascii"])
async def test_an_empty_or_non_ascii_app_dir_works(
    project: Path, started: Started, redis_url: str, prefix: str, where: str, run_store: RunStore
) -> None:
    """The worker imports mypkg from that app dir: a run of its handler comes back done."""
    env = {"LEASEHOLD_REDIS_URL": redis_url, "LEASEHOLD_PREFIX": prefix}
    if where == "empty":  # empty: the working directory
        worker = started.start(
            "worker", cwd=project, LEASEHOLD_HANDLERS="mypkg.handlers", LEASEHOLD_APP_DIR="",
            **env,
        )  # fmt: skip
    else:
        moved = project.parent / "projé ct"
        os.rename(project, moved)
        worker = started.start(
            "worker", "--app-dir", str(moved), cwd=moved.parent,
            LEASEHOLD_HANDLERS="mypkg.handlers", **env,
        )  # fmt: skip
    await started.wait_for(worker, "serving queues default")
    created = await run_store.create(NewRun(handler="greet", input={"name": "ünïcode"}))

    async def run() -> Run:
        return await run_store.get(created.run.id)

    done = await eventually(run, until=lambda r: r.status.is_terminal, what="the greet run")
    assert (done.status, done.output) == (RunStatus.SUCCEEDED, {"text": "hello ünïcode"})


def test_a_handler_package_not_found_says_where_it_looked_and_how_to_fix_it(
    project: Path,
) -> None:
    done = leasehold(
        "worker", cwd=project.parent, LEASEHOLD_HANDLERS="mypkg.handlers",
        LEASEHOLD_REDIS_URL="redis://127.0.0.1:1/0",
    )  # fmt: skip
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("leasehold: invalid setting LEASEHOLD_HANDLERS: cannot import ")
    assert f"looked in the app dir {project.parent.resolve()}" in line
    for fix in ("LEASEHOLD_APP_DIR", "--app-dir", "pip install -e .", "PYTHONPATH"):
        assert fix in line


@pytest.mark.parametrize(
    ("handlers", "app_dir", "says"),
    [
        ("mypkg.handlers", "no-such-dir", "invalid setting LEASEHOLD_APP_DIR: "),
        ("mypkg.broken", ".", "imports 'leasehold_test_not_installed', which is not installed"),
        ("app.mine", ".", "'app' is Leasehold's own package"),
        ("mypkg.nothere", ".", "cannot import mypkg.nothere"),
        ("mypkg.handlers", "mypkg/handlers.py", "is not a directory"),
    ],
)
def test_a_bad_app_dir_or_handler_module_is_one_line_and_exit_2(
    project: Path, handlers: str, app_dir: str, says: str
) -> None:
    done = leasehold(
        "worker", "--app-dir", app_dir, cwd=project, LEASEHOLD_HANDLERS=handlers,
        LEASEHOLD_REDIS_URL="redis://127.0.0.1:1/0",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert says in one_line(done)


@pytest.mark.parametrize("command", [["worker"], ["api"], ["reconciler"], ["probe", "redis"]])
def test_without_a_redis_and_without_up_a_process_exits_2_saying_what_to_set(
    project: Path, command: list[str]
) -> None:
    done = leasehold(*command, cwd=project, LEASEHOLD_HANDLERS="mypkg.handlers")
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert line.startswith("leasehold: no Redis to use: set LEASEHOLD_REDIS_URL, or start")
    assert "6379" not in line


def test_a_stale_book_is_named_and_refused_without_its_password(project: Path) -> None:
    dead = f"redis://:planted-pw-0123456789@127.0.0.1:{free_port()}/0"
    write_book(
        project / "state" / "stack.json",
        pid=os.getpid(),
        directory=project,
        embedded_redis=True,
        settings={REDIS_URL: dead, API_URL: "http://127.0.0.1:1"},
    )
    done = leasehold("worker", cwd=project, LEASEHOLD_STATE_DIR="state")
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert "stack.json is stale: its Redis at redis://:***@127.0.0.1:" in line
    assert "planted-pw" not in done.stderr + done.stdout


def test_a_corrupt_book_is_named_when_a_process_refuses(project: Path) -> None:
    book = project / "state" / "stack.json"
    book.parent.mkdir()
    book.write_text("{torn")
    book.chmod(0o600)
    done = leasehold("reconciler", cwd=project, LEASEHOLD_STATE_DIR="state")
    assert done.returncode == 2
    assert "stack.json is not JSON" in one_line(done)


def test_a_client_follows_the_live_book_and_says_so(
    project: Path, processes: Processes, redis_url: str
) -> None:
    _, api_url = processes.api()
    write_book(
        project / "state" / "stack.json",
        pid=os.getpid(),  # this test's process: alive as long as the test runs
        directory=project,
        embedded_redis=False,
        settings={
            REDIS_URL: redis_url,
            API_URL: api_url,
            "LEASEHOLD_PREFIX": processes.env["LEASEHOLD_PREFIX"],
        },
    )
    nowhere = {"LEASEHOLD_API_PORT": str(free_port()), "LEASEHOLD_STATE_DIR": "state"}
    done = leasehold("queues", "list", "--json", cwd=project, **nowhere)
    assert done.returncode == 0, done.stderr
    assert one_line(done) == (
        f"using the stack started by `leasehold up` in {project.resolve()}: API {api_url}, "
        f"Redis {redis_url}"
    )
    assert json.loads(done.stdout)
    # what the user set wins: --api-url, or LEASEHOLD_API_URL
    unreachable = f"http://127.0.0.1:{free_port()}"
    done = leasehold("queues", "list", "--api-url", unreachable, cwd=project, **nowhere)
    assert done.returncode == 1
    assert one_line(done).startswith(f"leasehold: cannot reach the API at {unreachable}")


def test_a_client_ignores_the_book_of_an_up_that_is_gone(project: Path) -> None:
    pid = _a_dead_pid()
    write_book(
        project / "state" / "stack.json",
        pid=pid,
        directory=project,
        embedded_redis=True,
        settings={REDIS_URL: "redis://:pw@127.0.0.1:1/0", API_URL: "http://127.0.0.1:1"},
    )
    port = free_port()
    done = leasehold(
        "runs", "list", cwd=project, LEASEHOLD_STATE_DIR="state", LEASEHOLD_API_PORT=str(port)
    )
    assert done.returncode == 1
    first, second = done.stderr.splitlines()
    assert first.endswith(f"the `leasehold up` that wrote it (pid {pid}) no longer runs")
    assert second.startswith(f"leasehold: cannot reach the API at http://127.0.0.1:{port}")


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=CLI_TIMEOUT_S)
    return child.pid


async def test_up_with_your_handlers_a_second_terminal_and_a_replica(
    project: Path, started: Started
) -> None:
    """The issue's first day: `up` on another port with mypkg, then `submit` and a replica."""
    port = free_port()
    here = {"LEASEHOLD_STATE_DIR": ".leasehold"}
    up = started.start(
        "up", "--port", str(port), "--workers", "1", cwd=project,
        LEASEHOLD_HANDLERS="mypkg.handlers", LEASEHOLD_LEASE_TTL_S="2",
        LEASEHOLD_DRAIN_TIMEOUT_S="2", **here,
    )  # fmt: skip
    await started.wait_for(up, "ready: API on")
    book = project / ".leasehold" / "stack.json"
    password = json.loads(book.read_text())["settings"][REDIS_URL].split(":")[2].split("@")[0]
    assert password and password not in started.log(up)
    # a second terminal, nothing set: the run goes to up's API on its port, and says so
    done = leasehold(
        "submit", "greet", "--input", '{"name": "ada"}', "--wait", "--json", cwd=project, **here
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["output"] == {"text": "hello ada"}
    assert f"API http://127.0.0.1:{port}, Redis redis://:***@127.0.0.1:" in done.stderr
    assert password not in done.stderr
    # a replica worker, nothing set: up's Redis, handlers, app dir and lease TTL
    replica = started.start("worker", cwd=project, **here)
    await started.wait_for(replica, "serving queues default")
    assert "using the stack started by `leasehold up` in " in started.log(replica)
    taken = next(
        line for line in started.log(replica).splitlines() if "from its address book" in line
    )
    for name in ("APP_DIR", "DRAIN_TIMEOUT_S", "HANDLERS", "LEASE_TTL_S", "REDIS_URL"):
        assert f"LEASEHOLD_{name}" in taken
    assert "LEASEHOLD_STATE_DIR" not in taken and password not in taken
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        workers = await eventually(
            lambda: http.get("/workers"),
            until=lambda response: len(response.json()) == 2,
            what="up's worker and the replica in GET /workers",
        )
    assert {worker["lease_ttl_ms"] for worker in workers.json()} == {2000}
    replica.send_signal(signal.SIGTERM)
    assert replica.wait(timeout=STOP_S) == 0
    os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in up's terminal
    assert up.wait(timeout=STOP_S + HEALTHY_TIMEOUT_S / 4) == 0
    assert not book.exists()
    # up stopped: nothing to join, and no silent 127.0.0.1:6379
    done = leasehold("worker", cwd=project, LEASEHOLD_HANDLERS="mypkg.handlers", **here)
    assert done.returncode == 2
    assert one_line(done).startswith("leasehold: no Redis to use")
