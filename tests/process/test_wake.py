"""An idle worker starts a new run on the queue's wake message, not on its safety-net timer."""

from __future__ import annotations

import time

import pytest

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import wait_status
from tests.support.processes import Processes

# far longer than the test may take: only the wake message can start the second run
IDLE_WAKE_S = 600


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_an_idle_worker_starts_a_run_on_its_wake_message(
    processes: Processes, run_store: RunStore, event_loop: str
) -> None:
    processes.worker(LEASEHOLD_IDLE_WAKE_S=str(IDLE_WAKE_S), LEASEHOLD_WORKER_EVENT_LOOP=event_loop)
    first = (await run_store.create(NewRun(handler="test.record", input={}))).run.id
    await wait_status(run_store, first, RunStatus.SUCCEEDED)  # up, subscribed, idle again
    created = time.monotonic()
    second = (await run_store.create(NewRun(handler="test.record", input={}))).run.id
    await wait_status(run_store, second, RunStatus.SUCCEEDED)
    assert time.monotonic() - created < IDLE_WAKE_S / 10
