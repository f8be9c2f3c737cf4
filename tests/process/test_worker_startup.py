"""A worker's start: what it imports before its first claim, and a Redis that refuses it.

Waiting cures an unreachable, loading or failing-over Redis, and a worker waits
for those (the one retry policy, ``app/retry.py``). It cannot cure a refusal:
a user without the right to load scripts is refused the same way forever. The
worker used to log "waiting for redis" for as long as it ran; now it exits and
says why, so the mistake is seen at deploy time.

Start-up is time before the first claim (issue 19 aim 2: spawn -> first claim
<= 250 ms): a worker claims once it has its settings, its handlers, its scripts, its
subscription and what running a run takes (a run claimed starts at once, as before),
and imports its reconciler (schedules, cron) once the first claim is answered.
"""

from __future__ import annotations

import json

from app.models import RunStatus
from app.stack.processes import Child
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support import claim_probe
from tests.support.memory import SmallRedis
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

EXIT_WITHIN_S = 60.0


async def exited(child: Child) -> int:
    """The child's exit status, once it has one."""

    async def status() -> int | None:
        return child.returncode

    code = await eventually(
        status, until=lambda code: code is not None, timeout_s=EXIT_WITHIN_S, what="exit"
    )
    assert code is not None
    return code


async def test_a_worker_refused_the_right_to_load_its_scripts_exits_saying_why(
    processes: Processes, small_redis: SmallRedis
) -> None:
    with small_redis.client() as admin:
        admin.acl_setuser(
            "noscripts",
            enabled=True,
            passwords=["+secret"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-script"],
        )
    url = f"redis://noscripts:secret@127.0.0.1:{small_redis.server.port}/0"
    worker = processes.worker(LEASEHOLD_REDIS_URL=url)
    assert await exited(worker) != 0
    log = worker.log()
    assert "cannot start: Redis refused the worker (not transient: NoPermissionError)" in log
    assert "no permissions to run the 'script|load' command" in log
    assert "retrying in" not in log  # refused once, not waited on


# what a worker needs only in the background or never: none of it may stand between its
# start and its first claim (the reconciler and the run store are imported once the first
# claim is answered, the children's modules on a run's first spawn, a helper's store on
# its first use)
NOT_BEFORE_THE_FIRST_CLAIM = [
    "app.reconciler.reconciler",
    "app.store.runs.store",
    "app.executor.children",
    "app.store.family.children",
    "app.store.outbox.store",
    "app.executor.waits",
    "app.executor.effects",
    "app.store.progress.store",
    "app.store.waits.store",
    "app.store.ratelimits.store",
    "app.reconciler.schedule_pass",
    "app.store.schedules.store",
    "app.store.flow.store",
    "app.cron",
    "cronsim",
    "app.telemetry.metrics_server",
    "app.models.api",
    "app.models.read",
    "httpx",
    "fastapi",
]


async def test_a_worker_claims_before_it_imports_its_reconciler(
    processes: Processes, run_store: RunStore
) -> None:
    created = await run_store.create(NewRun(handler="test.record", input={}))
    worker = processes.spawn(
        "worker",
        ["worker", "--concurrency", "4"],
        {"LEASEHOLD_HANDLERS": "tests.support.handlers"},
        module="tests.support.claim_probe",
    )
    run = await wait_status(run_store, created.run.id, RunStatus.SUCCEEDED)
    assert run.attempt == 1 and run.output is not None and run.output["execution"] == 1
    reports = [
        line.removeprefix(claim_probe.PREFIX)
        for line in worker.log().splitlines()
        if line.startswith(claim_probe.PREFIX)
    ]
    assert len(reports) == 1, worker.log()
    loaded = set(json.loads(reports[0]))
    # the worker and the handler module it serves are there: a claim it could run
    assert {"app.executor.worker", "app.executor.courier", "tests.support.handlers"} <= loaded
    assert [name for name in NOT_BEFORE_THE_FIRST_CLAIM if name in loaded] == []
