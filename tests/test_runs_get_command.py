"""``leasehold runs get`` without typer's command tree (app.runs_get_command): same answers.

The console script calls the command itself when it understands every word and hands
the rest to typer. The unit tests hold the parse to typer's; the process tests run
both paths, ``python -m app.launch`` (the script) and ``python -m app.cli`` (typer),
and compare what each prints and exits with, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from typer.testing import CliRunner

from app import cli, cli_api, runs_get_command
from app.embedded import free_port
from app.runs_get_command import RunsGetArgs, parse_runs_get_args
from tests.support.processes import PROBE_TIMEOUT_S, REPO_ROOT, Processes, python_prints

ARGVS = [
    ["q.X"],
    ["q.X", "--json"],
    ["--json", "q.X"],
    ["q.X", "--api-url", "http://h:1"],
    ["--api-url=http://h:1", "q.X", "--api-key=k=v"],
    ["q.X", "--api-key", "k", "--json", "--api-url", "http://h:1/"],
    ["q." + "X" * 10_000],
    # left to typer: help, unknown or repeated words, values it must judge
    [],
    ["--help"],
    ["q.X", "--help"],
    ["q.X", "r.Y"],
    ["q.X", "--json", "--json"],
    ["q.X", "--api-url", "a", "--api-url", "b"],
    ["q.X", "--api-url"],
    ["q.X", "--api-url="],
    ["q.X", "--api-url", "--json"],
    ["q.X", "--apiurl", "a"],
    ["q.X", "--json=1"],
    ["-q.X"],
    ["--", "q.X"],
    ["q.X", "-h"],
]


def typer_call(args: list[str], monkeypatch: pytest.MonkeyPatch) -> RunsGetArgs | int:
    """What typer's ``runs get`` would fetch and print with, or its exit status."""
    seen: dict[str, Any] = {}

    @contextmanager
    def api(api_url: str | None, api_key: str | None = None) -> Iterator[Any]:
        seen.update(api_url=api_url, api_key=api_key)
        yield type("Client", (), {"get": lambda self, run_id: seen.setdefault("id", run_id)})()

    monkeypatch.setattr(cli_api, "run_reader", api)
    monkeypatch.setattr(cli_api, "print_run", lambda run, as_json: seen.update(as_json=as_json))
    result = CliRunner().invoke(cli.app, ["runs", "get", *args])
    if "as_json" not in seen:
        return result.exit_code
    return RunsGetArgs(seen["id"], seen["as_json"], seen["api_url"], seen["api_key"])


@pytest.mark.parametrize("args", ARGVS, ids=" ".join)
def test_the_light_path_takes_a_command_as_typer_would_or_leaves_it_to_typer(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    light = parse_runs_get_args(args)
    if light is not None:
        assert light == typer_call(args, monkeypatch)


def test_the_light_path_takes_every_flag_and_leaves_help_to_typer() -> None:
    assert parse_runs_get_args(["--json", "q.X", "--api-url", "u", "--api-key=k"]) == (
        RunsGetArgs("q.X", as_json=True, api_url="u", api_key="k")
    )
    for args in (["--help"], ["q.X", "--bogus"], []):
        assert parse_runs_get_args(args) is None
        assert runs_get_command.main(args) is False  # the console script then runs typer


def both_paths(*args: str, **env: str) -> list[tuple[int, str, str]]:
    """``runs get <args>`` through the console script and through typer, with only ``env``."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    answers = []
    for module in ("app.launch", "app.cli"):
        done = subprocess.run(
            [sys.executable, "-m", module, "runs", "get", *args],
            env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
        answers.append((done.returncode, done.stdout, done.stderr))
    return answers


def test_a_run_is_printed_the_same_on_both_paths(processes: Processes) -> None:
    _, url = processes.api()
    created = subprocess.run(
        [
            *(sys.executable, "-m", "app.cli", "submit", "demo.echo"),
            *("--input", '{"m": 1}', "--json", "--api-url", url),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert created.returncode == 0, created.stderr
    run_id = created.stdout.split('"id":"', 1)[1].split('"', 1)[0]
    for args in ([run_id], [run_id, "--json"], ["default.01ARZ3NDEKTSV4RRFFQ69G5FAV"]):
        light, typer_path = both_paths(*args, "--api-url", url)
        assert light == typer_path
        assert light[0] == (1 if args[0].endswith("FAV") else 0), light[2]
    light, typer_path = both_paths(run_id, "--json", LEASEHOLD_API_URL=url)
    assert light == typer_path and light[1].startswith('{"id":"' + run_id)


@pytest.mark.parametrize(
    "env",
    [{}, {"LEASEHOLD_LOG_LEVEL": "bogus"}, {"LEASEHOLD_API_URL": "not-a-url"}],
    ids=["refused", "invalid-setting", "bad-url"],
)
def test_a_refusal_is_the_same_line_and_status_on_both_paths(env: dict[str, str]) -> None:
    url = env.get("LEASEHOLD_API_URL", f"http://127.0.0.1:{free_port()}")
    light, typer_path = both_paths("q.X", **{"LEASEHOLD_API_URL": url, **env})
    assert light == typer_path
    assert light[0] in (1, 2) and light[2].startswith("leasehold: "), light


def test_runs_get_does_not_build_the_command_tree() -> None:
    # typer builds click commands for all of the CLI's commands before it parses one
    code = (
        "import sys, typer.main\n"
        "from app.embedded import free_port\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('command tree built')\n"
        "typer.main.get_command = refuse\n"
        "sys.argv = ['leasehold', 'runs', 'get', 'q.X', '--api-url',\n"
        "            f'http://127.0.0.1:{free_port()}']\n"
        "from app.launch import main\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    print(exc.code)\n"
    )
    assert python_prints(code) == "1"


def test_runs_get_imports_neither_typer_nor_the_cli_module() -> None:
    # `import typer` alone is ~35 ms of a quiet core's CPU, the CLI's 38 commands more;
    # pydantic-settings' sources and python-dotenv ~25-45 ms, asyncio (a sync client) ~10-25
    code = (
        "import sys\n"
        f"sys.argv = ['leasehold', 'runs', 'get', 'q.X', '--api-url', 'http://127.0.0.1:{free_port()}']\n"
        "from app.launch import main\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        "names = ('typer', 'click', 'app.cli', 'pydantic_settings', 'dotenv',\n"
        "         'asyncio')\n"
        "print(status, [n for n in names if n in sys.modules])\n"
    )
    assert python_prints(code) == "1 []"


def test_the_light_reader_prints_what_httpx_and_pydantic_print(processes: Processes) -> None:
    # golden: the same command with one more (valid) setting takes the old path, httpx
    # and pydantic (app.environment.client_settings refuses to judge it), so every
    # field kind a real API writes is compared with what the code before printed
    from app.client import Client

    _, url = processes.api()
    processes.worker()
    with Client(url) as client:
        ids = [
            client.create("demo.echo", {"message": 'é\u2028\t"x"', "n": [1.5e-5, 2**70]}).id,
            client.create("demo.fail", {"message": "it broke"}).id,
            client.create(
                "demo.sleep",
                {"seconds": 30},
                metadata={"team": "ü", "n": "1"},
                idempotency_key="k-1",
                delay_s=3600,
                priority=3,
                retention_s=7200,
            ).id,
        ]
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while client.get(ids[1]).status.value != "failed" or not client.get(ids[0]).output:
            assert time.monotonic() < deadline, "the runs did not end"
            time.sleep(0.05)
    for run_id in [*ids, "default.01ARZ3NDEKTSV4RRFFQ69G5FAV"]:
        for flags in ([], ["--json"]):
            light, _ = both_paths(run_id, *flags, "--api-url", url)
            old, _ = both_paths(run_id, *flags, "--api-url", url, LEASEHOLD_LOG_LEVEL="INFO")
            assert light == old
            assert light[0] == (1 if run_id.endswith("FAV") else 0), light
    assert (
        '"output":{"message":"é\u2028\\t\\"x\\"","n":[0.000015,'
        in both_paths(ids[0], "--json", "--api-url", url)[0][1]
    )


def test_a_run_is_read_without_httpx_or_pydantic(processes: Processes) -> None:
    from app.client import Client

    _, url = processes.api()
    with Client(url) as client:
        run_id = client.create("demo.echo", {}).id
    code = (
        "import sys\n"
        f"sys.argv = ['leasehold', 'runs', 'get', {run_id!r}, '--json', '--api-url', {url!r}]\n"
        "from app.launch import main\n"
        "main()\n"
        "names = ('httpx', 'httpcore', 'pydantic', 'app.models', 'app.settings', 'typer')\n"
        "print([n for n in names if n in sys.modules])\n"
    )
    assert python_prints(code) == "[]"
