"""A worker starting against a Redis that answers, but refuses what the worker needs.

Waiting cures an unreachable, loading or failing-over Redis, and a worker waits
for those (the one retry policy, ``app/retry.py``). It cannot cure a refusal:
a user without the right to load scripts is refused the same way forever. The
worker used to log "waiting for redis" for as long as it ran; now it exits and
says why, so the mistake is seen at deploy time.
"""

from __future__ import annotations

from app.processes import Child
from tests.support.memory import SmallRedis
from tests.support.polling import eventually
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
