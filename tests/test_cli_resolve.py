"""`leasehold runs resolve` and the clients' resolve(), against a real API process."""

from __future__ import annotations

import pytest

from app.client import ApiError, AsyncClient, Client
from app.models import Run, RunStatus
from app.store.leases.store import LeaseStore
from app.store.progress.store import ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.processes import Processes
from tests.support.reconciliation import park_on_unknown_effect
from tests.test_cli import leasehold, one_error_line


@pytest.fixture
def api_url(processes: Processes) -> str:
    _, url = processes.api()
    return url


async def test_runs_resolve_retry_records_the_effect_and_queues_the_run(
    api_url: str, run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    parked = await park_on_unknown_effect(run_store, lease_store, progress)
    done = leasehold(
        "runs",
        "resolve",
        parked.id,
        "--action",
        "retry",
        "--effect-outcome",
        "applied",
        "--effect-result",
        '{"id": "ch_1"}',
        "--note",
        "found it in the provider's dashboard",
        "--json",
        api_url=api_url,
    )
    assert done.returncode == 0, done.stderr
    assert Run.model_validate_json(done.stdout).status == RunStatus.QUEUED
    records = await progress.effects("default", parked.id)
    assert records["charge:1"]["result"] == {"id": "ch_1"}


async def test_runs_resolve_of_a_run_that_is_not_parked_is_one_line_and_exit_1(
    api_url: str, run_store: RunStore
) -> None:
    queued = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    done = leasehold("runs", "resolve", queued, "--action", "fail", api_url=api_url)
    assert done.returncode == 1
    assert "409" in one_error_line(done)


def test_runs_resolve_with_output_that_is_not_json_exits_1_before_calling_the_api() -> None:
    done = leasehold(
        "runs",
        "resolve",
        "default.01J00000000000000000000000",
        "--action",
        "succeed",
        "--output",
        "{nope",
    )
    assert done.returncode == 1
    assert "--output is not JSON" in one_error_line(done)


async def test_both_clients_resolve_and_raise_the_problem_on_a_conflict(
    api_url: str, run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore
) -> None:
    first = await park_on_unknown_effect(run_store, lease_store, progress)
    with Client(api_url) as client:
        run = client.resolve(first.id, "succeed", output={"ok": True})
        assert (run.status, run.output) == (RunStatus.SUCCEEDED, {"ok": True})
        with pytest.raises(ApiError) as conflict:
            client.resolve(first.id, "fail")
        assert conflict.value.status == 409
    second = await park_on_unknown_effect(run_store, lease_store, progress)
    async with AsyncClient(api_url) as aclient:
        run = await aclient.resolve(second.id, "retry", effect_outcome="not_applied")
    assert run.status == RunStatus.QUEUED
    assert run.error is None
