"""A hand-off read late: a worker paused while its inbox read waited must not start a run
whose lease was given to another worker meanwhile (its handler's side effects would run
although fencing rejects every write)."""

from __future__ import annotations

import signal

import redis.asyncio as aioredis

from app.models import RunStatus
from app.stack.processes import Child
from app.store.keys import QueueKeys
from app.store.runs.store import RunStore
from tests.process.test_handoff import create, idle_handoff_worker
from tests.support.handlers import executions_key
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

NOT_STARTED = "a hand-off read late lost its lease meanwhile: not started"


async def test_a_worker_paused_before_its_hand_off_reply_never_starts_the_run(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    # a lease of 3 s: the registration lives 1 s, the inbox read waits 0.5 s at a time
    paused = await idle_handoff_worker(
        processes, run_store, redis_client, prefix, LEASEHOLD_LEASE_TTL_S="3"
    )
    paused.signal(signal.SIGSTOP)  # its inbox read stays waiting in Redis
    run_id = await create(run_store, on_lease_expired="retry", max_attempts=2)
    handed = await run_store.get(run_id)
    assert handed.status == RunStatus.RUNNING and handed.owner_id is not None
    taken = QueueKeys(prefix, "default").handoff_taken(handed.owner_id)
    # Redis answered the waiting read: the row is in `taken`, its reply unread by the worker
    await eventually(lambda: redis_client.llen(taken), until=lambda n: n == 1, what="taken")
    # the lease expires unrenewed; a living worker's reconciler requeues the run, and it runs
    processes.worker(LEASEHOLD_IDLE_WAKE_S="0.2")
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, timeout_s=60)
    assert done.owner_id != handed.owner_id and done.attempt == 2
    paused.signal(signal.SIGCONT)  # it reads the reply now, seconds after the lease ended
    await eventually(lambda: _log(paused), until=lambda log: NOT_STARTED in log, timeout_s=30)
    assert await redis_client.llen(taken) == 0
    # one execution of the handler in all: the living worker's
    assert int(await redis_client.get(executions_key(prefix, run_id)) or 0) == 1
    assert (await run_store.get(run_id)).status == RunStatus.SUCCEEDED


async def _log(child: Child) -> str:
    return child.log()
