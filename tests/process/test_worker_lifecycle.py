"""Workers as real processes, under real signals: what a user sees happen to runs."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from app.models import Run, RunStatus
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.stack.processes import Child
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.handlers import executions_key
from tests.support.polling import eventually, owner_pid, wait_status
from tests.support.processes import Processes, base_env

TTL_S = 1.0


async def submit(run_store: RunStore, handler: str = "test.record", **input: object) -> str:
    return (await run_store.create(NewRun(handler=handler, input=input))).run.id


async def submit_with(run_store: RunStore, new: NewRun) -> str:
    return (await run_store.create(new)).run.id


def proc_owning(run: Run, procs: list[Child]) -> Child:
    pid = owner_pid(run)
    return next(proc for proc in procs if proc.pid == pid)


async def types_and_fences(run_store: RunStore, run_id: str) -> list[tuple[str, int]]:
    return [(event.type, event.fence) for event in await run_store.read_events(run_id)]


async def test_happy_path_through_http(processes: Processes, run_store: RunStore) -> None:
    _, url = processes.api()
    processes.worker()
    async with httpx.AsyncClient(base_url=url) as http:
        created = await http.post(
            "/runs", json={"handler": "demo.echo", "input": {"message": "hello"}}
        )
        assert created.status_code == 201
        run_id = created.json()["id"]
        run = await eventually(
            lambda: http.get(f"/runs/{run_id}"),
            until=lambda r: r.json()["status"] == "succeeded",
            what="the run to succeed",
        )
    assert run.json()["output"] == {"message": "hello"}
    types = [event_type for event_type, _ in await types_and_fences(run_store, run_id)]
    assert types == ["created", "claimed", "succeeded"]


async def test_kill_9_of_the_owner_orphans_the_run_with_evidence(
    processes: Processes, run_store: RunStore
) -> None:
    owner = processes.worker()
    run_id = await submit(run_store, seconds=60)
    running = await wait_status(run_store, run_id, RunStatus.RUNNING)
    assert owner_pid(running) == owner.pid
    processes.worker()  # a survivor whose reconciler will notice
    owner.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    orphaned = await wait_status(run_store, run_id, RunStatus.ORPHANED)
    detected_after_s = time.monotonic() - killed_at
    print(
        f"orphan detected {detected_after_s:.2f}s after kill -9 "
        f"(TTL {TTL_S}s + reconcile interval {TTL_S / 3:.2f}s)"
    )
    assert orphaned.error is not None
    assert orphaned.error.message == "executor lease expired"
    assert orphaned.error.details["owner_id"] == running.owner_id
    assert orphaned.error.details["fence"] == running.fence
    assert {"last_renewed_at_ms", "lease_expires_at_ms", "detected_at_ms"} <= set(
        orphaned.error.details
    )
    events = await types_and_fences(run_store, run_id)
    assert events[-1][0] == "orphaned"


async def test_paused_owner_past_its_lease_is_fenced_out_when_it_wakes(
    processes: Processes, run_store: RunStore
) -> None:
    owner = processes.worker()
    run_id = await submit(run_store, seconds=2.0)
    running = await wait_status(run_store, run_id, RunStatus.RUNNING)
    processes.worker()
    owner.signal(signal.SIGSTOP)
    orphaned = await wait_status(run_store, run_id, RunStatus.ORPHANED)
    events_at_takeover = await types_and_fences(run_store, run_id)
    owner.signal(signal.SIGCONT)
    # the stale owner wakes, its handler finishes and it tries to write: all rejected
    await eventually(
        lambda: asyncio.sleep(0, owner.log()),
        until=lambda log: "lease lost" in log or "rejected" in log,
        what="the stale owner to notice it lost the lease",
    )
    after = await run_store.get(run_id)
    assert after.status == RunStatus.ORPHANED
    assert after.output is None
    assert after.fence == orphaned.fence
    assert await types_and_fences(run_store, run_id) == events_at_takeover
    assert all(fence != running.fence for _, fence in events_at_takeover[-1:])


async def test_stale_owner_cannot_overwrite_the_new_owners_result(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    first = processes.worker()
    run_id = await submit_with(
        run_store,
        NewRun(
            handler="test.record", input={"seconds": 2.5}, on_lease_expired="retry", max_attempts=3
        ),
    )
    stale = await wait_status(run_store, run_id, RunStatus.RUNNING)
    # stop the first owner only once its handler runs: `running` is written by the
    # claim, and on a loaded machine the handler's first line can come much later
    await eventually(
        lambda: redis_client.get(executions_key(prefix, run_id)),
        until=lambda count: count is not None and int(count) == 1,
        what="the first owner's handler to start",
    )
    first.signal(signal.SIGSTOP)
    second = processes.worker()
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    assert done.output is not None
    assert done.output["owner"] != stale.owner_id
    first.signal(signal.SIGCONT)
    await eventually(
        lambda: asyncio.sleep(0, first.log()),
        until=lambda log: "lease lost" in log or "rejected" in log,
        what="the stale owner to notice it lost the lease",
    )
    final = await run_store.get(run_id)
    assert final.output == done.output
    events = await types_and_fences(run_store, run_id)
    takeover = next(i for i, (kind, _) in enumerate(events) if kind == "lease_expired")
    later_fences = [fence for _, fence in events[takeover:]]
    assert stale.fence not in later_fences
    assert second.alive()
    assert int(await redis_client.get(executions_key(prefix, run_id))) == 2


async def test_cpu_bound_handler_holding_the_loop_past_its_lease_ttl_is_not_orphaned(
    processes: Processes, run_store: RunStore
) -> None:
    """The heartbeat renews on its own thread while the handler spins on the loop.

    A 2 s lease, not the 1 s of the other tests: at 1 s a renewal fails once it
    takes over 167 ms (the margin, TTL/6, bounds each heartbeat call) and jeopardy
    comes 0.83 s after the last one, which a loaded machine can reach without help
    from the handler (the test's redis-server runs at the session's niceness). The
    loop is held 1.5 TTLs (four renewals; a heartbeat on the loop would lose the
    lease at 2 s), for the same 3 s of CPU as before.
    """
    ttl = str(2 * TTL_S)
    processes.worker(LEASEHOLD_LEASE_TTL_S=ttl)
    run_id = await submit(run_store, "demo.cpu", seconds=3 * TTL_S)
    processes.worker(LEASEHOLD_LEASE_TTL_S=ttl)  # a second worker whose reconciler is watching
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
    assert done.status == RunStatus.SUCCEEDED
    assert done.output["held_loop_s"] >= 3 * TTL_S
    kinds = [kind for kind, _ in await types_and_fences(run_store, run_id)]
    assert kinds == ["created", "claimed", "succeeded"]


async def test_late_renewal_before_any_reconciler_acted_keeps_the_run(
    processes: Processes, run_store: RunStore
) -> None:
    owner = processes.worker("--no-reconciler")
    run_id = await submit(run_store, seconds=1.0)
    await wait_status(run_store, run_id, RunStatus.RUNNING)
    owner.signal(signal.SIGSTOP)
    await asyncio.sleep(TTL_S * 1.5)  # the lease expires while nobody reconciles
    owner.signal(signal.SIGCONT)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
    assert done.status == RunStatus.SUCCEEDED


async def test_sigterm_drains_short_runs_and_releases_the_long_one(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    draining = processes.worker(LEASEHOLD_DRAIN_TIMEOUT_S="1.5")
    short = [await submit(run_store, seconds=0.5) for _ in range(2)]
    long = await submit(run_store, seconds=4.0)
    for run_id in [*short, long]:
        await wait_status(run_store, run_id, RunStatus.RUNNING)
    processes.worker()
    draining.signal(signal.SIGTERM)
    for run_id in short:
        run = await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        assert owner_pid(run) == draining.pid
    finished = await wait_status(run_store, long, RunStatus.SUCCEEDED)
    assert owner_pid(finished) != draining.pid
    kinds = [kind for kind, _ in await types_and_fences(run_store, long)]
    assert kinds == ["created", "claimed", "released", "claimed", "succeeded"]
    assert draining.wait(timeout_s=15) == 0
    assert int(await redis_client.get(executions_key(prefix, long))) == 2


async def test_cancel_of_a_running_run_ends_cancelled(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    run_id = await submit(run_store, seconds=60)
    await wait_status(run_store, run_id, RunStatus.RUNNING)
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    await wait_status(run_store, run_id, RunStatus.CANCELLED, timeout_s=TTL_S * 5)
    kinds = [kind for kind, _ in await types_and_fences(run_store, run_id)]
    assert kinds == ["created", "claimed", "cancel_requested", "cancelled"]


async def test_cancel_of_a_run_whose_owner_is_dead_ends_cancelled(
    processes: Processes, run_store: RunStore
) -> None:
    owner = processes.worker()
    run_id = await submit(run_store, seconds=60)
    await wait_status(run_store, run_id, RunStatus.RUNNING)
    owner.signal(signal.SIGKILL)
    owner.wait(timeout_s=10)
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    processes.spawn("reconciler", ["reconciler"])
    cancelled = await wait_status(run_store, run_id, RunStatus.CANCELLED, RunStatus.ORPHANED)
    assert cancelled.status == RunStatus.CANCELLED


async def test_worker_survives_a_redis_restart_and_finishes_the_run(
    tmp_path: Path, prefix: str
) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "aof", appendonly=True).start()
    procs = Processes(base_env(server.url, prefix, lease_ttl_s=3.0), tmp_path)
    client = async_client(server.url)
    try:
        store = RunStore.for_settings(client, Scripts(), Settings(prefix=prefix))
        procs.worker()
        run_id = await submit(store, seconds=2.0)
        # the handler's own INCR, not the claim's RUNNING: a claimed run whose handler has
        # not yet started when Redis goes away fails its INCR, which is not this test's case
        await eventually(
            lambda: client.get(executions_key(prefix, run_id)),
            until=lambda count: count == "1",
            what="the handler to start",
        )
        server.stop()
        server.start()
        done = await wait_status(store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
        assert done.status == RunStatus.SUCCEEDED
        after = await submit(store, seconds=0)
        await wait_status(store, after, RunStatus.SUCCEEDED)
    finally:
        procs.reap()
        await client.aclose()
        server.stop()


async def test_two_workers_never_execute_a_run_twice(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    processes.worker("--concurrency", "8")
    processes.worker("--concurrency", "8")
    ids = await asyncio.gather(*[submit(run_store, seconds=0.01) for _ in range(200)])
    for run_id in ids:
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    counts = await redis_client.mget([executions_key(prefix, run_id) for run_id in ids])
    assert counts == ["1"] * len(ids)
    for run_id in ids[:20]:
        kinds = [kind for kind, _ in await types_and_fences(run_store, run_id)]
        assert kinds.count("claimed") == 1


async def test_a_worker_cut_off_from_redis_stops_its_run_without_writing(
    tmp_path: Path, prefix: str
) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "aof", appendonly=True).start()
    procs = Processes(base_env(server.url, prefix, lease_ttl_s=1.0), tmp_path)
    client = async_client(server.url)
    try:
        store = RunStore.for_settings(client, Scripts(), Settings(prefix=prefix))
        worker = procs.worker()
        run_id = await submit(store, seconds=60)
        await wait_status(store, run_id, RunStatus.RUNNING)
        server.stop()  # Redis unreachable: renewals fail
        await eventually(
            lambda: asyncio.sleep(0, worker.log()),
            until=lambda log: "jeopardy" in log and "without writing" in log,
            what="the worker to give the run up",
        )
        server.start()
        orphaned = await wait_status(store, run_id, RunStatus.ORPHANED, RunStatus.SUCCEEDED)
        assert orphaned.status == RunStatus.ORPHANED
        assert orphaned.output is None
        assert worker.alive()
    finally:
        procs.reap()
        await client.aclose()
        server.stop()


async def test_a_handler_failing_retryably_as_the_cancel_arrives_still_ends_cancelled(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    run_id = await submit_with(
        run_store, NewRun(handler="test.fails_on_cancel", input={}, max_attempts=5)
    )
    await wait_status(run_store, run_id, RunStatus.RUNNING)
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    ended = await wait_status(run_store, run_id, RunStatus.CANCELLED, RunStatus.QUEUED)
    assert ended.status == RunStatus.CANCELLED
    assert ended.attempt == 1
    events = await run_store.read_events(run_id)
    assert [event.type for event in events] == [
        "created",
        "claimed",
        "cancel_requested",
        "cancelled",
    ]
    assert events[-1].data["superseded"] == "failed"
    assert events[-1].data["error"]["code"] == "flaky"
