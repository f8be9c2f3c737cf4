"""A delayed run on a real worker: it starts no earlier than its time, and soon after it."""

from __future__ import annotations

from datetime import timedelta

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import wait_status
from tests.support.processes import Processes


async def test_a_delayed_run_starts_after_its_time_within_one_claim_round(
    processes: Processes, run_store: RunStore
) -> None:
    # a long safety-net interval: a start on time comes from the claim's next-due timer
    processes.worker(LEASEHOLD_IDLE_WAKE_S="60")
    warm = await run_store.create(NewRun(handler="demo.echo", input={"message": "warm"}))
    await wait_status(run_store, warm.run.id, RunStatus.SUCCEEDED)  # the worker is up and idle

    created = await run_store.create(
        NewRun(handler="demo.echo", input={"message": "later"}, delay_ms=2000)
    )
    assert created.run.run_at is not None
    run = await wait_status(run_store, created.run.id, RunStatus.SUCCEEDED)
    assert run.started_at is not None
    assert run.started_at >= created.run.run_at
    # one claim round, not the 60 s safety net (generous for a loaded machine)
    assert run.started_at - created.run.run_at < timedelta(seconds=10)
    types = [event.type for event in await run_store.read_events(run.id)]
    assert types == ["created", "wait", "claimed", "succeeded"]
