"""A planted Redis password and API key never appear in what any command prints.

Every command's ``--help``; every command that is not a server run to its error (an
API URL with credentials that nobody answers, missing or dummy arguments); the
processes' starts against a Redis that needs the planted password (api, worker,
reconciler, up) and up's "already running" refusal; and a settings error on a URL
holding it. Each output is grepped for the two secrets.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import typer

from app.cli.main import app
from app.stack.embedded import EmbeddedRedis, free_port
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT, env_without_settings

PASSWORD = f"planted-pw-{secrets.token_hex(8)}"
API_KEY = f"planted-key-{secrets.token_hex(8)}"
COMMAND_TIMEOUT_S = 30.0
STOP_S = 40.0  # a worker's drain (30 s by default) and up's children's stop
# commands that serve until stopped, or start a private stack: their start is checked below
SERVERS = {("up",), ("api",), ("worker",), ("gate",), ("reconciler",)}


def leaf_commands() -> list[tuple[tuple[str, ...], Any]]:
    """Every command of the CLI by its path (``("runs", "get")``), groups left out.

    Read by duck typing: typer carries its own copy of click's classes.
    """
    found: list[tuple[tuple[str, ...], Any]] = []

    def walk(path: tuple[str, ...], command: Any) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk((*path, name), sub)
        else:
            found.append((path, command))

    walk((), typer.main.get_command(app))
    return found


def dummy_arguments(command: Any) -> list[str]:
    """Values for its required arguments and options: enough to reach its error path."""
    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        value = dummy_value(getattr(param, "type", None))
        if getattr(param, "param_type_name", "") == "option":
            args += [param.opts[0], value]
        else:
            args.append(value)
    return args


def dummy_value(kind: Any) -> str:
    """A value of the parameter's type where it says one (else "x": a usage error is an error path
    too)."""
    if getattr(kind, "choices", None):
        return str(next(iter(kind.choices)))
    if getattr(kind, "name", "") in ("integer", "float", "integer range", "float range"):
        return "1"
    return "x"


def planted(output: str) -> list[str]:
    return [name for name, secret in (("password", PASSWORD), ("key", API_KEY)) if secret in output]


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis that needs the planted password; its URL."""
    server = EmbeddedRedis(
        data_dir=tmp_path_factory.mktemp("secret-redis"),
        appendonly=False,
        log_file=None,
        password=PASSWORD,
    )
    server.start()
    yield server.url
    server.stop()


def planted_env(redis_url: str, **extra: str) -> dict[str, str]:
    return env_without_settings(
        LEASEHOLD_REDIS_URL=redis_url,
        LEASEHOLD_API_KEYS=API_KEY,
        LEASEHOLD_API_KEY=API_KEY,
        LEASEHOLD_API_URL=f"http://user:{PASSWORD}@127.0.0.1:{free_port()}",
        LEASEHOLD_HANDLERS="app.demo",
        LEASEHOLD_PREFIX=f"t{secrets.token_hex(5)}",
        **extra,
    )


def run(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> str:
    """Everything ``leasehold <args>`` prints until it ends (or is cut off at the timeout)."""
    command = [sys.executable, "-m", "app.cli", *args]
    try:
        done = subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as cut:
        return f"{cut.stdout or ''}{cut.stderr or ''}"
    return done.stdout + done.stderr


def test_no_help_and_no_error_of_any_command_prints_a_secret(secret_redis: str) -> None:
    env = planted_env(secret_redis)
    calls = [["--help"]]
    for path, command in leaf_commands():
        calls.append([*path, "--help"])
        if path not in SERVERS and path[0] != "demo":
            calls.append([*path, *dummy_arguments(command)])
    assert len(calls) > 60  # every command, not a handful
    with ThreadPoolExecutor(max_workers=4) as pool:
        outputs = list(pool.map(lambda args: run(args, env), calls))
    leaks = {
        " ".join(args): planted(out)
        for args, out in zip(calls, outputs, strict=True)
        if planted(out)
    }
    assert not leaks
    # and the error paths were reached: the unreachable API is named, its password masked
    assert any("cannot reach the API at http://user:***@127.0.0.1:" in out for out in outputs)


def test_a_settings_error_on_a_url_never_echoes_it() -> None:
    bad = f"redis+sentinel://:{PASSWORD}@s1:26379"  # no service name: invalid
    for command in (["worker"], ["api"], ["reconciler"], ["runs", "list"], ["up"]):
        output = run(command, env_without_settings(LEASEHOLD_REDIS_URL=bad))
        assert "invalid setting LEASEHOLD_REDIS_URL" in output, output
        assert not planted(output), output


class Logs:
    """Long-running commands logging to files; all killed at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, args: list[str], env: dict[str, str], cwd: Path) -> Path:
        log = self.directory / f"{args[0]}-{len(self.started)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "app.cli", *args],
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.started.append((popen, log))
        return log

    def stop(self) -> None:
        """SIGTERM (`up` stops the children it started), then SIGKILL what is still there."""
        for popen, _ in self.started:
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        for popen, _ in self.started:
            try:
                popen.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=10)


async def test_no_process_start_prints_a_secret(secret_redis: str, tmp_path: Path) -> None:
    logs = Logs(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    env = planted_env(secret_redis, LEASEHOLD_STATE_DIR=".leasehold")
    started = {
        "the API's": (logs.start(["api", "--port", str(free_port())], env, project), "startup"),
        "the worker's": (logs.start(["worker"], env, project), "serving queues"),
        "the reconciler's": (logs.start(["reconciler"], env, project), "reconciler scanning"),
        "up's": (
            logs.start(["up", "--port", str(free_port()), "--workers", "1"], env, project),
            "ready: API on",
        ),
    }
    try:
        for what, (log, ready) in started.items():
            await eventually(
                lambda log=log: _read(log), until=lambda text, ready=ready: ready in text,
                what=f"{what} start", timeout_s=120,
            )  # fmt: skip
        # a second up from the same directory: refused, the running one's Redis named, masked
        refusal = run(["up", "--port", str(free_port())], env, cwd=project)
        assert "already runs from this directory" in refusal and "redis://:***@" in refusal
        assert not planted(refusal), refusal
    finally:
        logs.stop()
    for what, (log, _) in started.items():
        text = log.read_text()
        assert "Redis redis://:***@127.0.0.1:" in text, f"{what} log names no Redis:\n{text}"
        assert not planted(text), f"{what} log:\n{text}"


async def _read(path: Path) -> str:
    return path.read_text(errors="replace")  # noqa: ASYNC240 (a small log file, polled)


def test_the_checkout_s_env_file_is_never_committed() -> None:
    # `cp .env.example .env` is how settings are kept (README "Configuration"): it may hold
    # LEASEHOLD_REDIS_URL with its password and LEASEHOLD_API_KEYS
    done = subprocess.run(
        ["git", "check-ignore", "--quiet", "--no-index", ".env"], cwd=REPO_ROOT, check=False
    )
    assert done.returncode == 0, ".env is not in .gitignore"
