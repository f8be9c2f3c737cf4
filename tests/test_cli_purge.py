"""`leasehold runs delete|purge` and the clients' delete()/purge(), against a real API process."""

from __future__ import annotations

import json

import pytest

from app.client import ApiError, AsyncClient
from app.errors import RunNotFound
from app.models import RunStatus
from app.store.leases.store import LeaseStore, Outcome
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.processes import Processes
from tests.test_cli import leasehold, one_error_line

OWNER = "w-cli-purge"


@pytest.fixture
def api_url(processes: Processes) -> str:
    _, url = processes.api()
    return url


async def finished(run_store: RunStore, lease_store: LeaseStore, count: int) -> list[str]:
    """``count`` runs of the default queue, ended succeeded."""
    for _ in range(count):
        await run_store.create(NewRun(handler="demo.echo", input={}))
    claim = await lease_store.claim("default", OWNER, count)
    outcomes = [Outcome(run.lease, RunStatus.SUCCEEDED) for run in claim.runs]
    await lease_store.finish_and_claim("default", OWNER, outcomes, 0)
    return [run.id for run in claim.runs]


async def gone(run_store: RunStore, run_id: str) -> bool:
    try:
        await run_store.get(run_id)
    except RunNotFound:
        return True
    return False


async def test_runs_delete_removes_a_finished_run(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    (run_id,) = await finished(run_store, lease_store, 1)
    done = leasehold("runs", "delete", run_id, "--yes", api_url=api_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{run_id}: deleted"
    assert await gone(run_store, run_id)


async def test_runs_delete_asks_first_and_deletes_nothing_without_an_answer(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    (run_id,) = await finished(run_store, lease_store, 1)
    done = leasehold("runs", "delete", run_id, api_url=api_url)  # stdin is not a person
    assert done.returncode == 1
    assert "Delete" in done.stdout
    assert not await gone(run_store, run_id)


async def test_runs_delete_of_a_queued_run_is_one_line_and_exit_1(
    api_url: str, run_store: RunStore
) -> None:
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    done = leasehold("runs", "delete", queued, "--yes", api_url=api_url)
    assert done.returncode == 1
    assert "409" in one_error_line(done)
    assert (await run_store.get(queued)).status == RunStatus.QUEUED


async def test_runs_purge_deletes_every_match_batch_after_batch(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = await finished(run_store, lease_store, 5)
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    done = leasehold(
        "runs", "purge", "--status", "succeeded", "--batch", "2", "--yes", api_url=api_url
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith("(total 5)")
    assert len(done.stdout.splitlines()) >= 3  # several requests
    for run_id in ids:
        assert await gone(run_store, run_id)
    assert (await run_store.get(queued)).status == RunStatus.QUEUED
    again = leasehold("runs", "purge", "--yes", "--json", api_url=api_url)
    assert json.loads(again.stdout) == {"deleted": 0}


def test_runs_purge_of_a_status_that_is_not_terminal_exits_1(api_url: str) -> None:
    done = leasehold("runs", "purge", "--status", "running", "--yes", api_url=api_url)
    assert done.returncode == 1
    assert "422" in one_error_line(done)


async def test_the_async_client_deletes_and_purges(
    api_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    first, second = await finished(run_store, lease_store, 2)
    async with AsyncClient(api_url) as client:
        await client.delete(first)
        with pytest.raises(ApiError) as missing:
            await client.delete(first)
        assert missing.value.status == 404
        result = await client.purge(status="succeeded")
    assert result.ids == [second] and result.done


def test_submit_asks_for_its_own_retention_and_queued_ttl(api_url: str) -> None:
    done = leasehold(
        "submit",
        "demo.echo",
        "--retention-s",
        "90",
        "--queued-ttl-s",
        "60",
        "--json",
        api_url=api_url,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["retention_s"] == 90
    refused = leasehold("submit", "demo.echo", "--retention-s", "-1", api_url=api_url)
    assert refused.returncode == 1
    assert "retention_s" in one_error_line(refused)
