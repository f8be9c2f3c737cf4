"""A saturated worker's prefetch: runs claimed ahead are leased, wait their turn, and
never run beyond the concurrency; a drain releases them at once and a cancel ends them
without a call. Real worker processes on a real Redis."""

from __future__ import annotations

import asyncio
import signal

import redis.asyncio as aioredis

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.handlers import executions_key
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

CONCURRENCY = 4
PREFETCH = 3
SLOW_S = 8.0  # long enough to still run while the test looks at the prefetched runs
# the runs created after the first CONCURRENCY (prefetched, or left queued): how long
# they take once started is not what is checked, so they do not add 2 x SLOW_S
AFTER_S = 0.5


async def submit(run_store: RunStore, *, seconds: float) -> str:
    new = NewRun(handler="test.record", input={"seconds": seconds})
    return (await run_store.create(new)).run.id


async def executions(redis_client: aioredis.Redis, prefix: str, run_ids: list[str]) -> list[int]:
    counts = await redis_client.mget([executions_key(prefix, run_id) for run_id in run_ids])
    return [int(count or 0) for count in counts]


async def saturated_worker(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> tuple[list[str], list[str], list[str]]:
    """A worker that has seen short runs, now holding slow ones: (running, prefetched, queued)."""
    processes.worker(
        "--concurrency",
        str(CONCURRENCY),
        LEASEHOLD_PREFETCH_MAX=str(PREFETCH),
        LEASEHOLD_LEASE_TTL_S="2",
        LEASEHOLD_DRAIN_TIMEOUT_S="60",  # the running runs finish inside a drain
    )
    # no-op runs (microseconds each): the window opens however loaded the machine is
    short = [
        (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id for _ in range(20)
    ]
    for run_id in short:
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    # claimed in creation order (FIFO): the first CONCURRENCY take the slots
    durations = [SLOW_S] * CONCURRENCY + [AFTER_S] * (PREFETCH + 1)
    slow = [await submit(run_store, seconds=seconds) for seconds in durations]

    async def held() -> tuple[list[int], list[RunStatus]]:
        runs = [await run_store.get(run_id) for run_id in slow]
        return await executions(redis_client, prefix, slow), [run.status for run in runs]

    counts, statuses = await eventually(
        held,
        until=lambda seen: (
            sum(seen[0]) == CONCURRENCY
            and seen[1].count(RunStatus.RUNNING) == CONCURRENCY + PREFETCH
        ),
        what="the concurrency running and the prefetch window leased",
    )
    running = [run_id for run_id, count in zip(slow, counts, strict=True) if count]
    prefetched = [
        run_id
        for run_id, count, status in zip(slow, counts, statuses, strict=True)
        if not count and status == RunStatus.RUNNING
    ]
    queued = [run_id for run_id in slow if run_id not in running + prefetched]
    return running, prefetched, queued


async def test_prefetched_runs_are_leased_wait_their_turn_and_never_exceed_the_concurrency(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    running, prefetched, queued = await saturated_worker(processes, run_store, redis_client, prefix)
    assert (len(running), len(prefetched), len(queued)) == (CONCURRENCY, PREFETCH, 1)
    # until the first running run ends (past several lease TTLs), no prefetched run
    # has started, and none was orphaned: their leases are renewed while they wait
    while True:
        statuses = [(await run_store.get(run_id)).status for run_id in running + prefetched]
        if RunStatus.SUCCEEDED in statuses[:CONCURRENCY]:
            break
        assert statuses == [RunStatus.RUNNING] * (CONCURRENCY + PREFETCH)
        assert await executions(redis_client, prefix, prefetched) == [0] * PREFETCH
        await asyncio.sleep(0.1)
    for run_id in prefetched:
        run = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, timeout_s=60)
        assert run.attempt == 1
    # the slow runs taught the worker that its runs are long: the last run was not
    # prefetched but claimed once a slot was free, and every run executed once
    await wait_status(run_store, queued[0], RunStatus.SUCCEEDED, timeout_s=60)
    assert await executions(redis_client, prefix, running + prefetched + queued) == [1] * 8


async def test_a_cancelled_prefetched_run_ends_cancelled_without_its_handler_called(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    _, prefetched, _ = await saturated_worker(processes, run_store, redis_client, prefix)
    victim = prefetched[0]
    assert await run_store.cancel(victim) == RunStatus.CANCELLING
    await wait_status(run_store, victim, RunStatus.CANCELLED, timeout_s=30)
    kinds = [event.type for event in await run_store.read_events(victim)]
    assert kinds == ["created", "claimed", "cancel_requested", "cancelled"]
    assert await executions(redis_client, prefix, [victim]) == [0]


async def test_a_drain_releases_prefetched_runs_at_once_and_lets_running_ones_finish(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    running, prefetched, _ = await saturated_worker(processes, run_store, redis_client, prefix)
    worker = processes.started[-1]
    worker.signal(signal.SIGTERM)
    for run_id in prefetched:
        kinds = await eventually(
            lambda run_id=run_id: run_store.read_events(run_id),
            until=lambda events: "released" in [event.type for event in events],
            what=f"{run_id} released",
        )
        assert [event.type for event in kinds] == ["created", "claimed", "released"]
    released_last = max([await last_event_ms(run_store, run_id) for run_id in prefetched])
    for run_id in running:
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED, timeout_s=60)
        # released before any running run ended: the drain did not make them wait
        assert released_last < await last_event_ms(run_store, run_id)
    assert await executions(redis_client, prefix, prefetched) == [0] * PREFETCH
    assert worker.wait(timeout_s=30) == 0


async def last_event_ms(run_store: RunStore, run_id: str) -> int:
    """When the run's last event was written (the Redis clock of its stream id)."""
    events = await run_store.read_events(run_id)
    return int(events[-1].id.split("-")[0])
