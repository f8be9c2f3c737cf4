"""The ``leasehold`` CLI as a user runs it: a real API and worker, the console script
in a subprocess, and what it prints and exits with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from app.models import Run, RunStatus
from app.models.api import QueuePage
from app.models.read import RunPage
from app.stack.embedded import free_port
from app.store.leases.store import LeaseStore
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT, Processes, env_without_settings, python_prints

CLI_TIMEOUT_S = 60


def leasehold(
    *args: str, api_url: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``leasehold <args>`` with only ``env`` of LEASEHOLD_* (none from the caller's shell)."""
    env = env_without_settings(**(env or {}))
    where = ["--api-url", api_url] if api_url else []
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args, *where],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The failure is one line on stderr, not a traceback."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("leasehold: ")
    return lines[0]


@pytest.fixture
def api_url(processes: Processes) -> str:
    """An API with nobody executing runs: they stay queued."""
    _, url = processes.api()
    return url


@pytest.fixture
def live_api_url(processes: Processes, api_url: str) -> str:
    """An API with a worker behind it."""
    processes.worker()
    return api_url


def submit_and_wait(handler: str, input: str, api_url: str) -> tuple[int, Run]:
    done = leasehold("submit", handler, "--input", input, "--wait", "--json", api_url=api_url)
    return done.returncode, Run.model_validate_json(done.stdout)


def test_submit_wait_json_prints_the_succeeded_run(live_api_url: str) -> None:
    code, run = submit_and_wait("demo.echo", '{"message":"x"}', live_api_url)
    assert code == 0
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"message": "x"}
    assert run.handler == "demo.echo"


def test_submit_wait_of_a_failing_run_exits_nonzero_with_its_error(live_api_url: str) -> None:
    done = leasehold(
        "submit", "demo.fail", "--input", '{"message":"it broke"}', "--wait", api_url=live_api_url
    )
    assert done.returncode != 0
    # an ended run's status says why, once: its code and message
    assert "status    failed: demo_failure: it broke" in done.stdout.splitlines()
    assert "error     " not in done.stdout


def test_runs_get_shows_the_run_to_a_person(live_api_url: str) -> None:
    _, run = submit_and_wait("demo.echo", '{"message":"x"}', live_api_url)
    done = leasehold("runs", "get", run.id, api_url=live_api_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"run       {run.id}"
    assert "status    succeeded" in lines
    assert "handler   demo.echo (queue default)" in lines
    assert 'output    {"message": "x"}' in lines


def test_runs_list_filters_by_status(live_api_url: str) -> None:
    _, succeeded = submit_and_wait("demo.echo", "{}", live_api_url)
    _, failed = submit_and_wait("demo.fail", "{}", live_api_url)
    done = leasehold("runs", "list", "--status", "succeeded", "--json", api_url=live_api_url)
    assert done.returncode == 0, done.stderr
    page = RunPage.model_validate_json(done.stdout)
    assert [run.id for run in page.items] == [succeeded.id]
    human = leasehold("runs", "list", api_url=live_api_url).stdout.splitlines()
    failed_line = next(line for line in human if line.startswith(failed.id))
    # its message says its code (demo_failure), so the code is not said again
    assert " failed " in failed_line and failed_line.endswith("  demo failure")
    assert any(line.startswith(succeeded.id) for line in human)


@pytest.fixture
async def orphaned_id(api_url: str, lease_store: LeaseStore) -> str:
    """A run whose owner never renewed its lease, orphaned by a reconciler pass."""
    created = leasehold("submit", "demo.sleep", "--json", api_url=api_url)
    run_id = Run.model_validate_json(created.stdout).id
    claimed = (await lease_store.claim("default", "w-gone", 1)).runs
    assert [run.id for run in claimed] == [run_id]
    # nobody renews: once the test's 1 s lease runs out a reconciler pass orphans it
    await eventually(
        lambda: lease_store.reconcile("default"), until=bool, timeout_s=10, what="the orphan"
    )
    return run_id


def test_an_orphaned_run_reads_orphaned_executor_lease_expired_once_everywhere(
    api_url: str, orphaned_id: str
) -> None:
    got = leasehold("runs", "get", orphaned_id, api_url=api_url).stdout
    shown = got.splitlines()
    assert "status    orphaned: executor lease expired" in shown
    assert [line for line in shown if line.startswith("error ")] == []  # said once
    evidence = json.loads(next(line for line in shown if line.startswith("evidence  "))[10:])
    assert evidence["owner_id"] == "w-gone" and evidence["fence"] == 1
    listed = leasehold("runs", "list", "--status", "orphaned", api_url=api_url).stdout
    assert listed.splitlines()[0].startswith(f"{orphaned_id}  orphaned ")
    assert listed.splitlines()[0].endswith("  executor lease expired")
    watched = leasehold("runs", "watch", orphaned_id, api_url=api_url)
    assert watched.returncode == 1  # the run did not succeed
    assert watched.stdout.splitlines()[-1].endswith(
        "== orphaned: executor lease expired (owner w-gone, fence 1)  [fence 2]"
    )
    for text in (got, listed, watched.stdout):
        assert "orphaned: orphaned" not in text
        assert "lease_expired: executor" not in text


def test_runs_cancel_of_a_queued_run_says_cancelled(api_url: str) -> None:
    queued = Run.model_validate_json(
        leasehold("submit", "demo.sleep", "--json", api_url=api_url).stdout
    )
    assert queued.status == RunStatus.QUEUED
    done = leasehold("runs", "cancel", queued.id, api_url=api_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{queued.id}: cancelled"
    again = leasehold("runs", "cancel", queued.id, api_url=api_url)
    assert again.stdout.strip() == f"{queued.id}: cancelled"  # idempotent
    shown = leasehold("runs", "get", queued.id, "--json", api_url=api_url)
    assert Run.model_validate_json(shown.stdout).status == RunStatus.CANCELLED


def test_submit_with_input_that_is_not_json_exits_1_before_calling_the_api() -> None:
    done = leasehold("submit", "demo.echo", "--input", "{message: x}", api_url="http://127.0.0.1:1")
    assert done.returncode == 1
    assert one_error_line(done).startswith("leasehold: --input is not JSON:")


def test_submit_of_an_unknown_handler_prints_the_apis_problem_detail(api_url: str) -> None:
    done = leasehold("submit", "no.such.handler", api_url=api_url)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("leasehold: HTTP 422: unknown handler 'no.such.handler'; known: ")
    assert "demo.echo" in line or "more (GET /handlers)" in line


def test_submit_of_input_the_handler_rejects_names_the_field(api_url: str) -> None:
    done = leasehold("submit", "demo.sleep", "--input", '{"seconds": "soon"}', api_url=api_url)
    assert done.returncode == 1
    line = one_error_line(done)
    assert "input for handler 'demo.sleep' is invalid" in line
    assert "seconds: " in line


def test_runs_get_of_an_unknown_run_says_not_found(api_url: str) -> None:
    missing = "default.01ARZ3NDEKTSV4RRFFQ69G5FAV"
    done = leasehold("runs", "get", missing, api_url=api_url)
    assert done.returncode == 1
    assert one_error_line(done) == f"leasehold: HTTP 404: run {missing!r} not found"


def test_an_api_that_is_not_running_is_one_line_not_a_traceback() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = leasehold("runs", "list", api_url=url)
    assert done.returncode == 1
    line = one_error_line(done)
    assert f"cannot reach the API at {url}" in line
    assert "--api-url" in line


def test_queues_declare_then_list_and_an_undeclared_queue_is_one_error_line(api_url: str) -> None:
    refused = leasehold("submit", "demo.sleep", "--queue", "mail", api_url=api_url)
    assert refused.returncode == 1
    assert "not declared" in one_error_line(refused)
    declared = leasehold("queues", "declare", "mail", api_url=api_url)
    assert declared.returncode == 0, declared.stderr
    assert declared.stdout.strip() == "declared mail"
    assert leasehold("submit", "demo.sleep", "--queue", "mail", api_url=api_url).returncode == 0
    page = QueuePage.model_validate_json(
        leasehold("queues", "list", "--json", api_url=api_url).stdout
    )
    by_name = {queue.name: queue for queue in page.items}
    assert sorted(by_name) == ["default", "mail"]
    assert by_name["mail"].ready == 1
    human = leasehold("queues", "list", api_url=api_url).stdout
    assert "mail" in human and "parked" in human


def test_a_keyed_api_names_the_variable_and_api_key_gets_through(processes: Processes) -> None:
    key = "cli-key-0123456789abcdef"
    _, url = processes.api(LEASEHOLD_API_KEYS=key)
    refused = one_error_line(leasehold("runs", "list", api_url=url))
    assert "LEASEHOLD_API_KEY" in refused and "--api-key" in refused
    wrong = one_error_line(leasehold("runs", "list", "--api-key", "not-the-key", api_url=url))
    assert "not valid" in wrong and "LEASEHOLD_API_KEY" in wrong
    done = leasehold("runs", "list", "--json", "--api-key", key, api_url=url)
    assert done.returncode == 0, done.stderr
    assert RunPage.model_validate_json(done.stdout).items == []


def test_runs_get_and_watch_of_a_parked_run_say_why_and_how_to_unpark_it(
    processes: Processes,
) -> None:
    from app.demo.judge import EVALUATOR

    _, url = processes.api()
    processes.worker(LEASEHOLD_WATCHDOG_EVALUATOR=EVALUATOR)
    _, parked = submit_and_wait("demo.approval", '{"lease_s": 0.3}', url)
    assert parked.status == RunStatus.WAITING_HUMAN
    assert parked.escalation is not None
    assert parked.escalation["reason"] == "an approval needs a person"
    shown = leasehold("runs", "get", parked.id, api_url=url)
    assert shown.returncode == 0, shown.stderr
    assert "waiting   for a person: an approval needs a person" in shown.stdout.splitlines()
    assert f"unpark    leasehold runs resume {parked.id} --input JSON" in shown.stdout
    command = [sys.executable, "-m", "app.cli", "runs", "watch", parked.id, "--api-url", url]
    with subprocess.Popen(
        command,
        env=env_without_settings(),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as watch:
        try:
            assert watch.stdout is not None
            seen: list[str] = []
            for line in watch.stdout:  # pytest-timeout bounds it if the hint never comes
                seen.append(line)
                if "unpark" in line:
                    break
            assert f"unpark    leasehold runs resume {parked.id}" in seen[-1], seen
            assert "waiting   for a person: an approval needs a person" in seen[-2]
            resumed = leasehold("runs", "resume", parked.id, "--input", '{"ok": 1}', api_url=url)
            assert resumed.returncode == 0, resumed.stderr
            rest = watch.stdout.read()
            assert watch.wait(timeout=CLI_TIMEOUT_S) == 0
            assert "== succeeded" in rest
            assert "unpark" not in rest  # said once, while it waited
        finally:
            watch.kill()


def test_a_run_parked_for_an_unknown_effect_names_the_resolve_command() -> None:
    from app.cli.api_calls import unpark_lines as _unpark_lines
    from app.models import RunError

    run = Run(
        id="default.X",
        queue="default",
        handler="demo.charge",
        status=RunStatus.RECONCILIATION_REQUIRED,
        created_at=datetime.now(UTC),
        error=RunError(code="effect_outcome_unknown", message="effect charge", retryable=False),
    )
    lines = _unpark_lines(run)
    assert lines[0].startswith("waiting   for a person: an effect's outcome is unknown")
    assert "leasehold runs resolve default.X --action retry --effect-outcome" in lines[1]
    assert _unpark_lines(run.model_copy(update={"status": RunStatus.SUCCEEDED})) == []


def test_help_lists_every_command_with_its_first_sentence() -> None:
    done = leasehold("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m app.cli [OPTIONS] COMMAND [ARGS]...\n")
    commands = done.stdout.split("Commands:\n", 1)[1].splitlines()
    names = ["up", "api", "worker", "gate", "reconciler", "submit", "runs", "probe", "queues"]
    assert [line.split()[0] for line in commands] == [
        *names,
        "schedules",
        "keys",
        "namespaces",
        "builds",
        "demo",
    ]
    assert "  api         Serve the HTTP API (uvicorn).\n" in done.stdout


def test_worker_help_lists_every_flag() -> None:
    done = leasehold("worker", "--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--queues", "--concurrency", "--lease-ttl-s", "--no-reconciler", "--help"):
        assert flag in done.stdout


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ((), {"LEASEHOLD_CONCURRENCY": "0"}, "invalid setting LEASEHOLD_CONCURRENCY"),
        (("--concurrency", "9" * 400), {}, "invalid setting LEASEHOLD_CONCURRENCY"),
        (("--lease-ttl-s", "0"), {}, "invalid setting LEASEHOLD_LEASE_TTL_S"),
        (("--queues", "no spaces"), {}, "invalid setting LEASEHOLD_QUEUES"),
        ((), {}, "no handlers: set LEASEHOLD_HANDLERS"),
        ((), {"LEASEHOLD_HANDLERS": "nobody.wrote.this"}, "invalid setting LEASEHOLD_HANDLERS"),
        ((), {"LEASEHOLD_HANDLERS": "mypkg/handlers.py"}, "invalid setting LEASEHOLD_HANDLERS"),
        ((), {"LEASEHOLD_HANDLERS": ".relative"}, "invalid setting LEASEHOLD_HANDLERS"),
        (("--app-dir", "d" * 5000), {"LEASEHOLD_HANDLERS": "app.demo"}, "invalid setting"),
    ],
)
def test_a_refused_worker_says_why_in_one_line_and_exits_2(
    args: tuple[str, ...], env: dict[str, str], says: str
) -> None:
    # a Redis named (never reached): without one, that is the refusal (tests/process/test_first_day)
    done = leasehold("worker", *args, env={"LEASEHOLD_REDIS_URL": "redis://127.0.0.1:1/0", **env})
    assert done.returncode == 2
    assert one_error_line(done).startswith(f"leasehold: {says}")


def test_a_worker_flag_typer_cannot_read_is_a_usage_error() -> None:
    done = leasehold("worker", "--concurrency", "x")
    assert done.returncode == 2
    assert "Invalid value for '--concurrency'" in done.stderr


def test_runs_get_with_an_invalid_setting_is_one_line_and_status_2() -> None:
    done = leasehold("runs", "get", "q.X", env={"LEASEHOLD_LOG_LEVEL": "bogus"})
    assert done.returncode == 2
    assert one_error_line(done).startswith("leasehold: invalid setting LEASEHOLD_LOG_LEVEL")


def test_help_lists_flags_without_a_type_and_values_with_theirs() -> None:
    done = leasehold("demo", "kill-worker", "--help")
    assert done.returncode == 0, done.stderr
    assert "<bool>" not in done.stdout
    flag = next(line for line in done.stdout.splitlines() if "--retry" in line)
    assert flag.split()[:2] == ["--retry", "on_lease_expired=retry:"]
    assert "--lease-ttl-s <float>" in done.stdout


def test_starting_the_cli_imports_nothing_only_some_commands_need() -> None:
    # what a `runs get` loop pays at every start: redis, asyncio, httpx, rich and
    # pydantic-settings are each ~0.1 s (BENCHMARKS.md, CLI start-up)
    heavy = ["redis", "asyncio", "httpx", "rich", "pydantic_settings", "app.handlers"]
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['leasehold', 'runs', 'get', '--help']\n"
        "try:\n    runpy.run_module('app.cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print([name for name in {heavy!r} if name in sys.modules])\n"
    )
    assert python_prints(probe) == "[]"


def test_runs_signal_wakes_a_waiting_run_and_a_finished_one_is_one_error_line(
    live_api_url: str,
) -> None:
    submitted = leasehold(
        "submit", "demo.review", "--input", '{"timeout_s": 600}', "--json", api_url=live_api_url
    )
    run_id = Run.model_validate_json(submitted.stdout).id
    deadline = time.monotonic() + CLI_TIMEOUT_S
    shown = leasehold("runs", "get", run_id, api_url=live_api_url)
    waiting = "waiting   parked until signal review arrives, or until "
    while waiting not in shown.stdout and time.monotonic() < deadline:
        shown = leasehold("runs", "get", run_id, api_url=live_api_url)
    assert f"leasehold runs signal {run_id} review --payload JSON" in shown.stdout, shown.stdout
    assert " (its timeout); no lease held" in shown.stdout
    # the timeout's deadline with its date: ten minutes after the park, by the Redis clock
    timeout_at = next(line for line in shown.stdout.splitlines() if line.startswith("deadline  "))
    parked = Run.model_validate_json(
        leasehold("runs", "get", run_id, "--json", api_url=live_api_url).stdout
    )
    assert parked.waiting_for is not None
    until = datetime.fromtimestamp(parked.waiting_for["until_ms"] / 1000, tz=UTC)
    assert timeout_at == f"deadline  {until.isoformat()}"
    done = leasehold("runs", "signal", run_id, "review", "--payload", '"ok"', api_url=live_api_url)
    assert done.stdout.strip() == f"{run_id}: signal review delivered", done.stderr
    finished = leasehold("runs", "watch", run_id, api_url=live_api_url)
    assert finished.returncode == 0, finished.stdout
    run = Run.model_validate_json(
        leasehold("runs", "get", run_id, "--json", api_url=live_api_url).stdout
    )
    assert run.output == {"subject": "draft #1", "decision": "ok", "by": "signal"}
    late = leasehold("runs", "signal", run_id, "review", api_url=live_api_url)
    assert late.returncode != 0
    assert "succeeded" in one_error_line(late)


def test_version_prints_the_package_version_and_help_keeps_each_description_whole() -> None:
    from app import __version__

    done = leasehold("--version")
    assert (done.returncode, done.stdout) == (0, f"leasehold {__version__}\n")
    wide = subprocess.run(
        [sys.executable, "-m", "app.cli", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "160"},
        timeout=60,
    )
    commands = wide.stdout.split("Commands:\n", 1)[1]
    assert "drain on SIGTERM." in commands and "..." not in commands
