"""singleton_key with cancel_active when the active run's worker is frozen (SIGSTOP).

The new run may start only once the old run's slot is back, which for a frozen owner
means its lease expired and a reconciler ended it `cancelled`; the old owner, woken
afterwards, can write nothing.
"""

from __future__ import annotations

import asyncio
import signal

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually, owner_pid, wait_status
from tests.support.processes import Processes


async def test_cancel_active_with_a_frozen_owner_starts_the_new_run_and_fences_the_old_one(
    processes: Processes, run_store: RunStore
) -> None:
    owner = processes.worker()
    old = await run_store.create(
        NewRun(handler="test.record", input={"seconds": 3.0}, singleton_key="thread-1")
    )
    running = await wait_status(run_store, old.run.id, RunStatus.RUNNING)
    assert owner_pid(running) == owner.pid
    processes.worker()  # the survivor: its reconciler ends the old run, it starts the new one
    owner.signal(signal.SIGSTOP)
    new = await run_store.create(
        NewRun(
            handler="test.record",
            input={"seconds": 0.1},
            singleton_key="thread-1",
            on_conflict="cancel_active",
        )
    )
    assert (await run_store.get(old.run.id)).status == RunStatus.CANCELLING
    done = await wait_status(run_store, new.run.id, RunStatus.SUCCEEDED, timeout_s=60)
    cancelled = await run_store.get(old.run.id)
    assert cancelled.status == RunStatus.CANCELLED
    old_events = await run_store.read_events(old.run.id)
    new_events = await run_store.read_events(new.run.id)
    assert [e.type for e in old_events][-2:] == ["cancel_requested", "cancelled"]
    assert old_events[-1].data["reason"] == "owner_lost"
    new_claim = next(e for e in new_events if e.type == "claimed")
    assert old_events[-1].ts <= new_claim.ts  # it started only after the old one ended
    owner.signal(signal.SIGCONT)
    # the stale owner wakes, its handler finishes and it tries to write: all rejected
    await eventually(
        lambda: asyncio.sleep(0, owner.log()),
        until=lambda log: "lease lost" in log or "rejected" in log,
        what="the stale owner to notice it lost the lease",
    )
    assert await run_store.read_events(old.run.id) == old_events
    assert (await run_store.get(old.run.id)).status == RunStatus.CANCELLED
    assert (await run_store.get(new.run.id)).output == done.output
