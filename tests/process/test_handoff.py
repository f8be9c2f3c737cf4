"""The hand-off with real worker processes: an idle worker gets a new run from its
inbox, with no wake message and no claim of its own (LEASEHOLD_HANDOFF)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.stack.processes import Child
from app.store.keys import QueueKeys
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

# far longer than the test may take: no safety-net claim can start a run
IDLE_WAKE_S = 600


async def publishes(client: aioredis.Redis) -> int:
    """PUBLISH commands so far (from scripts included): a wake message is one."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_publish", {}).get("calls", 0))


async def registered(client: aioredis.Redis, keys: QueueKeys) -> int:
    return int(await client.zcard(keys.handoff_idle))


async def create(run_store: RunStore, **options: object) -> str:
    new = NewRun(handler="test.record", input={}, **options)  # type: ignore[arg-type]
    return (await run_store.create(new)).run.id


async def idle_worker(
    processes: Processes,
    run_store: RunStore,
    client: aioredis.Redis,
    keys: QueueKeys,
    on: bool,
    **env: str,
) -> None:
    """A worker up, past its first run, idle (and registered when the hand-off is on)."""
    processes.worker(
        LEASEHOLD_IDLE_WAKE_S=str(IDLE_WAKE_S), LEASEHOLD_HANDOFF=str(on).lower(), **env
    )
    await wait_status(run_store, await create(run_store), RunStatus.SUCCEEDED)
    if on:
        await eventually(lambda: registered(client, keys), until=lambda n: n == 1, what="idle")


async def idle_handoff_worker(
    processes: Processes, run_store: RunStore, client: aioredis.Redis, prefix: str, **env: str
) -> Child:
    """An idle worker registered for a hand-off on the default queue."""
    await idle_worker(processes, run_store, client, QueueKeys(prefix, "default"), True, **env)
    return processes.started[-1]


@pytest.mark.parametrize("on", [True, False])
async def test_an_idle_worker_starts_a_new_run_without_a_wake_message(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str, on: bool
) -> None:
    keys = QueueKeys(prefix, "default")
    await idle_worker(processes, run_store, redis_client, keys, on)
    before = await publishes(redis_client)
    run_id = await create(run_store)
    await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    # the create published no wake: only the hand-off can have started the run
    assert (await publishes(redis_client) - before == 0) is on
    events = [e.type for e in await run_store.read_events(run_id)]
    assert events[:2] == ["created", "claimed"] and events[-1] == "succeeded"


async def test_back_to_back_creates_the_second_goes_the_wake_path(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = QueueKeys(prefix, "default")
    await idle_worker(processes, run_store, redis_client, keys, True)
    before = await publishes(redis_client)
    # in one script call: the second is created before the worker can register again
    # (it does so 2 ms after its hand-off started, while the first run still runs)
    created = await run_store.create_many([NewRun(handler="test.record", input={})] * 2)
    first, second = [c.run.id for c in created if not isinstance(c, Exception)]
    done = [await wait_status(run_store, run_id, RunStatus.SUCCEEDED) for run_id in (first, second)]
    assert [run.attempt for run in done] == [1, 1]
    # the registration took the first; the second was announced by a wake message
    assert await publishes(redis_client) - before >= 1
    # idle again, the worker registered anew
    assert await eventually(lambda: registered(redis_client, keys), until=lambda n: n == 1) == 1


async def test_a_run_handed_to_a_killed_worker_goes_back_to_its_queue(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """Nothing ever ran it: with the default policy (orphan) it still runs, at attempt 1."""
    # a lease of 6 s: its registration lives 2 s, time enough to create the run after the kill
    dead = await idle_handoff_worker(
        processes, run_store, redis_client, prefix, LEASEHOLD_LEASE_TTL_S="6"
    )
    dead.kill()  # SIGKILL: its registration stays until it expires
    run_id = await create(run_store)
    handed = await run_store.get(run_id)
    assert handed.status == RunStatus.RUNNING  # leased to the dead worker
    processes.worker(LEASEHOLD_IDLE_WAKE_S="0.2", LEASEHOLD_HANDOFF="true")
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, timeout_s=30)
    assert done.owner_id != handed.owner_id
    assert done.attempt == 1
    released = [e for e in await run_store.read_events(run_id) if e.type == "released"]
    assert [e.data for e in released] == [
        {"owner_id": handed.owner_id, "reason": "handoff_undelivered"}
    ]


async def test_a_drained_worker_withdraws_its_registration(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = QueueKeys(prefix, "default")
    worker = await idle_handoff_worker(processes, run_store, redis_client, prefix)
    worker.stop()
    assert worker.wait(10) == 0
    assert await registered(redis_client, keys) == 0
    run_id = await create(run_store)
    assert (await run_store.get(run_id)).status == RunStatus.QUEUED


async def test_a_one_slot_worker_keeps_taking_runs_past_its_registrations(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    """The slot kept for a registration is its claim's again: a worker of one slot runs
    run after run, by hand-off, by wake, and after registrations lapsed and renewed."""
    keys = QueueKeys(prefix, "default")
    processes.worker(
        "--concurrency", "1", LEASEHOLD_IDLE_WAKE_S=str(IDLE_WAKE_S), LEASEHOLD_HANDOFF="true"
    )
    done = [
        await wait_status(run_store, await create(run_store), RunStatus.SUCCEEDED) for _ in range(3)
    ]
    batch = [await create(run_store) for _ in range(3)]  # one handed off, two woken
    done += [await wait_status(run_store, run_id, RunStatus.SUCCEEDED) for run_id in batch]
    # one worker ran all six, each at its first attempt: no run was stranded or retried
    assert len({run.owner_id for run in done}) == 1
    assert [run.attempt for run in done] == [1] * 6
    first = await redis_client.zrange(keys.handoff_idle, 0, 0, withscores=True)
    # renewed at half its life while idle: its expiry moves on
    await eventually(
        lambda: redis_client.zrange(keys.handoff_idle, 0, 0, withscores=True),
        until=lambda now: bool(now) and bool(first) and now[0][1] > first[0][1],
        what="a renewed registration",
    )
    last = await wait_status(run_store, await create(run_store), RunStatus.SUCCEEDED)
    assert last.owner_id == done[0].owner_id and last.attempt == 1
