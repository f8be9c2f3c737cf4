"""``leasehold worker`` without typer in front (app.worker_command): same flags, same answers.

The console script parses a worker's flags itself when it understands every word, and
hands the rest to typer. Each test holds one side of that promise: what the light
path takes, typer would have taken the same way; what it does not, typer answers.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from app import cli, worker_command
from app.worker_command import WorkerFlags, parse_worker_args
from tests.support.processes import PROBE_TIMEOUT_S, REPO_ROOT

ARGVS = [
    [],
    ["--queues", "default,mail"],
    ["--queues=mail"],
    ["--concurrency", "3"],
    ["--concurrency=007"],
    ["--lease-ttl-s", "0.5"],
    ["--lease-ttl-s=.25"],
    ["--lease-ttl-s", "2."],
    ["--no-reconciler"],
    ["--no-reconciler", "--queues", "a", "--concurrency", "50", "--lease-ttl-s", "30"],
    ["--queues=a=b"],
    ["--concurrency", "9" * 400],  # huge: taken, then refused by the setting's bound
    ["--lease-ttl-s", "1" * 400 + ".5"],
    ["--queues", "q" * 10_000],
    # left to typer: help, unknown or repeated words, values it must judge
    ["--help"],
    ["--queue", "a"],
    ["--concurrency", "x"],
    ["--concurrency", "-1"],
    ["--concurrency", "1_0"],
    ["--concurrency", "\u0663"],  # a digit, but not ASCII
    ["--concurrency", "5\n"],
    ["--lease-ttl-s", "\u0661.5"],
    ["--concurrency", "5", "--concurrency", "6"],
    ["--lease-ttl-s", "inf"],
    ["--lease-ttl-s", "nan"],
    ["--lease-ttl-s", "1e3"],
    ["--queues"],
    ["--queues="],
    ["--queues", "--concurrency", "5"],
    ["--no-reconciler", "--no-reconciler"],
    ["--no-reconciler=yes"],
    ["default"],
    ["--", "--queues", "a"],
    ["-h"],
]


def typer_flags(args: list[str], monkeypatch: pytest.MonkeyPatch) -> WorkerFlags | int:
    """What the typer command would start the worker with, or its exit status."""
    started: list[WorkerFlags] = []
    monkeypatch.setattr(cli, "run_worker", started.append)
    result = CliRunner().invoke(cli.app, ["worker", *args])
    return started[0] if started else result.exit_code


@pytest.mark.parametrize("args", ARGVS, ids=" ".join)
def test_the_light_path_takes_a_command_as_typer_would_or_leaves_it_to_typer(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    light = parse_worker_args(args)
    if light is not None:
        assert light == typer_flags(args, monkeypatch)


def test_the_light_path_takes_every_documented_flag() -> None:
    assert parse_worker_args(
        ["--queues", "a,b", "--concurrency", "4", "--lease-ttl-s=1.5", "--no-reconciler"]
    ) == WorkerFlags(queues="a,b", concurrency=4, lease_ttl_s=1.5, no_reconciler=True)
    assert parse_worker_args([]) == WorkerFlags()


def test_help_and_usage_errors_are_typers(monkeypatch: pytest.MonkeyPatch) -> None:
    for args in (["--help"], ["--concurrency", "x"], ["--bogus"]):
        assert parse_worker_args(args) is None
        assert worker_command.main(args) is False  # the console script then runs typer
    assert typer_flags(["--concurrency", "x"], monkeypatch) == 2


def start(module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m <module> worker <args>`` with only ``env`` of LEASEHOLD_*."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    return subprocess.run(
        [sys.executable, "-m", module, "worker", *args],
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ((), {"LEASEHOLD_CONCURRENCY": "0"}, "invalid setting LEASEHOLD_CONCURRENCY"),
        (("--concurrency", "0"), {}, "invalid setting LEASEHOLD_CONCURRENCY"),
        (("--concurrency", "9" * 400), {}, "invalid setting LEASEHOLD_CONCURRENCY"),
        (("--lease-ttl-s", "0"), {}, "invalid setting LEASEHOLD_LEASE_TTL_S"),
        (("--queues", "no spaces"), {}, "invalid setting LEASEHOLD_QUEUES"),
        ((), {}, "no handlers: set LEASEHOLD_HANDLERS"),
        ((), {"LEASEHOLD_HANDLERS": "nobody.wrote.this"}, "invalid setting LEASEHOLD_HANDLERS"),
    ],
)
def test_a_refused_worker_says_the_same_line_on_both_paths(
    args: tuple[str, ...], env: dict[str, str], says: str
) -> None:
    light, typer_path = start("app.launch", *args, **env), start("app.cli", *args, **env)
    assert (light.returncode, light.stderr) == (2, typer_path.stderr), light.stderr
    assert typer_path.returncode == 2
    assert light.stderr.startswith(f"leasehold: {says}"), light.stderr
    assert len(light.stderr.splitlines()) == 1


def test_worker_help_through_the_console_script_lists_every_flag() -> None:
    done = start("app.launch", "--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--queues", "--concurrency", "--lease-ttl-s", "--no-reconciler", "--help"):
        assert flag in done.stdout
