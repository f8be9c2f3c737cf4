"""The heartbeat thread: renewals, LOST and CANCEL answers, and the jeopardy deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.executor.heartbeat import Heartbeat, HeartbeatCallbacks
from app.executor.table import LeaseTable
from app.store.leases.store import Lease
from app.store.lua.transition import LeaseAnswer


class ScriptedRenewer:
    """Answers renewals the way the test says; ``fail`` makes Redis unreachable."""

    def __init__(self, answer: LeaseAnswer = LeaseAnswer.OK) -> None:
        self.answer = answer
        self.fail = False
        self.calls: list[list[str]] = []

    def renew(self, leases: Sequence[Lease]) -> dict[str, LeaseAnswer]:
        self.calls.append([lease.run_id for lease in leases])
        if self.fail:
            raise RedisConnectionError("Redis is gone")
        return {lease.run_id: self.answer for lease in leases}


class SilentRedis(ScriptedRenewer):
    """A partitioned Redis: every call hangs for the socket timeout, then times out."""

    def __init__(self, socket_timeout_s: float) -> None:
        super().__init__()
        self.socket_timeout_s = socket_timeout_s

    def renew(self, leases: Sequence[Lease]) -> dict[str, LeaseAnswer]:
        self.calls.append([lease.run_id for lease in leases])
        return self.advertise(0.0)

    def advertise(self, loop_lag_ms: float) -> Any:
        time.sleep(self.socket_timeout_s)
        raise RedisTimeoutError("Timeout reading from socket")


async def run_heartbeat(
    renewer: ScriptedRenewer,
    table: LeaseTable,
    *,
    interval_s: float,
    jeopardy_after_s: float,
    until: asyncio.Future[tuple[str, str]],
    timeout_s: float = 5.0,
    advertise: Callable[[float], Any] = lambda lag: None,
) -> tuple[str, str]:
    loop = asyncio.get_running_loop()

    def lost(run_id: str, reason: str) -> None:
        if not until.done():
            until.set_result((run_id, reason))

    def cancelled(run_id: str) -> None:
        if not until.done():
            until.set_result((run_id, "cancel"))

    heartbeat = Heartbeat(
        table=table,
        renewer=renewer,  # type: ignore[arg-type]
        loop=loop,
        callbacks=HeartbeatCallbacks(lost, cancelled, lambda lag: None),
        interval_s=interval_s,
        jeopardy_after_s=jeopardy_after_s,
        advertise=advertise,
    )
    heartbeat.start()
    try:
        return await asyncio.wait_for(until, timeout=timeout_s)
    finally:
        heartbeat.stop()
        heartbeat.join(timeout=5)


async def test_a_run_whose_renewals_keep_failing_is_stopped_before_its_lease_runs_out() -> None:
    table = LeaseTable()
    renewer = ScriptedRenewer()
    renewer.fail = True
    confirmed_at = time.monotonic()
    table.add(Lease("default", "default.R1", "w-1", 1), confirmed_at)
    done = asyncio.get_running_loop().create_future()
    run_id, reason = await run_heartbeat(
        renewer, table, interval_s=0.1, jeopardy_after_s=0.25, until=done
    )
    stopped_after = time.monotonic() - confirmed_at
    assert (run_id, reason) == ("default.R1", "jeopardy")
    assert 0.25 <= stopped_after < 0.3 + 0.25  # at the deadline, well before a 0.3 s TTL + slack
    assert len(table) == 0


async def test_a_silent_redis_cannot_push_the_jeopardy_stop_to_the_lease_expiry() -> None:
    # found by the chaos harness: against a blackholed Redis each call blocks for the
    # socket timeout (the safety margin), and the advertisement after a failed renewal
    # blocked for another one, so the check that should stop the run at TTL - margin came
    # at the TTL itself, when a reconciler may already have handed the run to another worker
    ttl_s, margin_s = 3.6, 0.6
    silent = SilentRedis(socket_timeout_s=margin_s)
    table = LeaseTable()
    confirmed_at = time.monotonic()
    table.add(Lease("default", "default.R1", "w-1", 1), confirmed_at)
    done = asyncio.get_running_loop().create_future()
    run_id, reason = await run_heartbeat(
        silent,
        table,
        interval_s=ttl_s / 3,
        jeopardy_after_s=ttl_s - margin_s,
        until=done,
        timeout_s=10,
        advertise=silent.advertise,
    )
    stopped_after = time.monotonic() - confirmed_at
    assert (run_id, reason) == ("default.R1", "jeopardy")
    assert ttl_s - margin_s <= stopped_after < ttl_s - margin_s / 2, stopped_after


async def test_renewals_that_succeed_keep_the_run_out_of_jeopardy() -> None:
    table = LeaseTable()
    renewer = ScriptedRenewer()
    table.add(Lease("default", "default.R1", "w-1", 1), time.monotonic())
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(1.0, done.set_result, ("none", "none"))
    assert await run_heartbeat(
        renewer, table, interval_s=0.05, jeopardy_after_s=0.2, until=done
    ) == ("none", "none")
    assert len(renewer.calls) >= 10
    assert len(table) == 1


async def test_lost_and_cancel_answers_reach_the_loop() -> None:
    for answer, expected in [(LeaseAnswer.LOST, "lease_lost"), (LeaseAnswer.CANCEL, "cancel")]:
        table = LeaseTable()
        table.add(Lease("default", "default.R1", "w-1", 1), time.monotonic())
        done = asyncio.get_running_loop().create_future()
        result = await run_heartbeat(
            ScriptedRenewer(answer), table, interval_s=0.05, jeopardy_after_s=10, until=done
        )
        assert result == ("default.R1", expected)


async def test_all_leases_of_a_queue_are_renewed_in_one_call() -> None:
    table = LeaseTable()
    renewer = ScriptedRenewer()
    for index in range(500):
        table.add(Lease("default", f"default.R{index}", "w-1", 1), time.monotonic())
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.3, done.set_result, ("none", "none"))
    await run_heartbeat(renewer, table, interval_s=0.1, jeopardy_after_s=10, until=done)
    assert all(len(call) == 500 for call in renewer.calls)
