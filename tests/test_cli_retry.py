"""`leasehold runs retry`, `runs retry-many --wait` and `runs operation`, against a real API."""

from __future__ import annotations

import json

import pytest

from app.models import RunStatus
from app.store.leases.store import LeaseStore, Outcome
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.processes import Processes
from tests.test_cli import leasehold, one_error_line


@pytest.fixture
def api_url(processes: Processes) -> str:
    _, url = processes.api()
    return url


async def failed_run(run_store: RunStore, lease_store: LeaseStore, code: str) -> str:
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={"m": 1}))).run.id
    claimed = (await lease_store.claim("default", "w-1", 1)).runs[0]
    error = json.dumps({"code": code, "message": "m"})
    await lease_store.finish_and_claim(
        "default", "w-1", [Outcome(claimed.lease, RunStatus.FAILED, error_json=error)], 0
    )
    return run_id


async def test_runs_retry_prints_the_new_run_and_a_second_one_is_one_error_line(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    old_id = await failed_run(run_store, lease_store, "boom")
    done = leasehold("runs", "retry", old_id, "--checkpoint", "drop", "--json", api_url=api_url)
    assert done.returncode == 0, done.stderr
    new = json.loads(done.stdout)
    assert new["retry_of"] == old_id and new["status"] == RunStatus.QUEUED
    shown = leasehold("runs", "get", old_id, api_url=api_url)
    assert f"re-run as {new['id']}" in shown.stdout
    again = leasehold("runs", "retry", old_id, api_url=api_url)
    assert again.returncode != 0
    assert new["id"] in one_error_line(again)


async def test_runs_retry_many_waits_for_the_operation_and_runs_operation_shows_it(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    wanted = [await failed_run(run_store, lease_store, "upstream") for _ in range(3)]
    other = await failed_run(run_store, lease_store, "bad_input")
    done = leasehold(
        "runs", "retry-many", "--error-code", "upstream", "--wait", "--json", api_url=api_url
    )
    assert done.returncode == 0, done.stderr
    operation = json.loads(done.stdout.splitlines()[-1])
    assert (operation["status"], operation["retried"]) == ("done", 3)
    assert {pair["run_id"] for pair in operation["recent"]} == set(wanted)
    assert (await run_store.get(other)).retried_by is None
    shown = leasehold("runs", "operation", operation["id"], api_url=api_url)
    assert f"operation {operation['id']} done: 3 re-run" in shown.stdout
    refused = leasehold("runs", "operation", operation["id"], "--resume", api_url=api_url)
    assert refused.returncode != 0 and "done" in one_error_line(refused)
