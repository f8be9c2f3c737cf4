"""A real API and worker against a Redis that fills up: the issue's reproduction, as a test.

The order a durable executor must degrade in: creates are refused early and
clearly (503 + Retry-After, before Redis refuses anything), and runs already
running keep their leases and write their real outcomes even once Redis is
past maxmemory; queued work waits and goes on once memory frees. No 500.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.models import RunStatus
from app.settings import Settings
from app.stack.embedded import free_port
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.handlers import HoldInput, hold_key, hold_output
from tests.support.memory import SmallRedis
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes, base_env

HELD = 4  # the worker's concurrency: a fifth held run waits in the queue
OUTPUT_BYTES = 200_000
FILLER = "x" * 20_000


async def fill_until_refused(
    http: httpx.AsyncClient,
) -> tuple[list[httpx.Response], dict[str, Any]]:
    """Create 20 KB runs until /readyz, reading memory afresh, says creates are refused.

    A single 503 can come from the API's estimate of what it admitted since its
    last reading while the real use is just below the mark; creating on until a
    fresh reading agrees ends past it for real.
    """
    answers = []
    for index in range(3_000):
        body = {"handler": "demo.echo", "queue": "filler", "input": {"m": f"{index}{FILLER}"}}
        answers.append(await http.post("/runs", json=body))
        if answers[-1].status_code != 201:
            ready = (await http.get("/readyz")).json()
            if ready["memory"]["creates_refused"]:
                return answers, ready
    raise AssertionError("3000 creates and /readyz never said creates are refused")


async def test_when_redis_fills_creates_are_refused_first_and_running_runs_keep_their_outputs(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    procs = Processes(base_env(small_redis.url, prefix, lease_ttl_s=1.0), tmp_path)
    settings = Settings(redis_url=small_redis.url, prefix=prefix, state_dir=tmp_path / "s")
    client = async_client(small_redis.url)
    store = RunStore.for_settings(client, Scripts(), settings)
    small_redis.allow(6_000_000)  # the scripts loaded first: the headroom is for runs
    try:
        with small_redis.client() as sync:
            sync.set(hold_key(prefix), "1")
        api, url = procs.api(
            LEASEHOLD_QUEUES="default,filler",  # filler: declared, and no worker claims it
            LEASEHOLD_MEMORY_HIGH_WATER="0.6",
            LEASEHOLD_MEMORY_CHECK_INTERVAL_S="0.05",
        )
        worker = procs.worker(LEASEHOLD_CONCURRENCY=str(HELD))
        inputs = [HoldInput(output_bytes=OUTPUT_BYTES, tag=f"run{n}") for n in range(HELD + 1)]
        ids = [
            (await store.create(NewRun(handler="test.hold", input=held.model_dump()))).run.id
            for held in inputs
        ]
        await eventually(
            lambda: asyncio.gather(*(store.get(run_id) for run_id in ids)),
            until=lambda runs: sum(run.status == RunStatus.RUNNING for run in runs) == HELD,
            what=f"{HELD} runs running",
        )
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            # 1. creates are refused by Leasehold before Redis refuses anything
            answers, ready = await fill_until_refused(http)
            refusals = [a for a in answers if a.status_code != 201]
            assert {a.status_code for a in answers} == {201, 503}
            assert {a.json()["type"].rsplit("/", 1)[1] for a in refusals} == {"admission-refused"}
            assert all(a.headers["Retry-After"] for a in refusals)
            assert small_redis.oom_refusals() == 0
            assert any("high-water" in problem for problem in ready["problems"])

            # 2. Redis itself full: the held runs keep their leases (renewals are not refused)
            small_redis.set_max(small_redis.used_bytes() // 2)
            full_since = datetime.now(UTC).timestamp()
            await eventually(
                lambda: asyncio.gather(*(store.get(run_id) for run_id in ids[:HELD])),
                until=lambda runs: all(
                    run.status == RunStatus.RUNNING
                    and run.lease_expires_at is not None
                    and run.lease_expires_at.timestamp() > full_since + 2.5
                    for run in runs
                ),
                what="leases renewed past two TTLs at maxmemory",
            )
            full = (await http.get("/readyz")).json()
            assert any("at maxmemory" in problem for problem in full["problems"])
            refused = await http.post("/runs", json={"handler": "demo.echo", "input": {}})
            assert refused.status_code == 503 and refused.headers["Retry-After"]

            # 3. the handlers return while Redis is past maxmemory: every outcome lands
            with small_redis.client() as sync:
                sync.delete(hold_key(prefix))  # DEL is allowed at maxmemory
            for run_id, held in zip(ids[:HELD], inputs, strict=False):
                run = await wait_status(store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
                assert run.status == RunStatus.SUCCEEDED
                assert run.output == hold_output(held), "the output is the handler's"
                assert run.attempt == 1 and run.fence == 1, "ran once, never taken over"
            assert small_redis.oom_refusals() > 0, "Redis was refusing writes meanwhile"
            # the fifth waits: claims are refused while Redis is full
            assert (await store.get(ids[HELD])).status == RunStatus.QUEUED

            # 4. memory frees: queued work goes on, creates are accepted again
            small_redis.set_max(0)
            last = await wait_status(store, ids[HELD], RunStatus.SUCCEEDED, timeout_s=60)
            assert last.output == hold_output(inputs[HELD])
            await eventually(
                lambda: http.post("/runs", json={"handler": "demo.echo", "input": {}}),
                until=lambda answer: answer.status_code == 201,
                what="creates accepted again",
            )
        assert worker.alive() and api.alive()
        api_log = api.log()
        assert " 500 " not in api_log and "Internal error" not in api_log
        assert "Traceback" not in api_log
        assert "claim" in worker.log() and "Redis is out of memory" in worker.log()
        assert "lease in jeopardy" not in worker.log()
    finally:
        await client.aclose()
        procs.reap()


async def test_a_spawn_past_the_mark_waits_visibly_and_creates_its_children_once_memory_frees(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    procs = Processes(base_env(small_redis.url, prefix, lease_ttl_s=2.0), tmp_path)
    settings = Settings(redis_url=small_redis.url, prefix=prefix, state_dir=tmp_path / "s")
    client = async_client(small_redis.url)
    store = RunStore.for_settings(client, Scripts(), settings)
    max_bytes = small_redis.allow(6_000_000)
    try:
        procs.worker(LEASEHOLD_MEMORY_HIGH_WATER="0.6", LEASEHOLD_MEMORY_CHECK_INTERVAL_S="0.05")
        # past the mark (not at maxmemory): claims go on, new runs must not
        with small_redis.client() as sync:
            sync.set(f"{prefix}:test:ballast", "x" * int(max_bytes * 0.3))
        parent = (await store.create(NewRun(handler="test.fan_out", input={"children": 3}))).run.id
        waits = await eventually(
            lambda: store.read_events(parent),
            until=lambda events: any(
                e.type == "wait" and e.data.get("kind") == "memory" for e in events
            ),
            what="the spawn's memory wait event",
        )
        wait = next(e for e in waits if e.type == "wait" and e.data.get("kind") == "memory")
        assert wait.data["what"] == "spawn of demo.echo"
        assert "high-water mark" in wait.data["reason"]
        assert (await store.get(parent)).status == RunStatus.RUNNING
        listed = (await store.list_runs(limit=50)).items
        assert [run.id for run in listed] == [parent], "no child while past the mark"
        with small_redis.client() as sync:
            sync.delete(f"{prefix}:test:ballast")
        done = await wait_status(store, parent, RunStatus.SUCCEEDED, timeout_s=60)
        assert len(done.output["children"]) == 3
        assert small_redis.oom_refusals() == 0
    finally:
        await client.aclose()
        procs.reap()


# lines each failing loop may write over the window: its first at once, then one per
# REPEAT_LOG_EVERY_S (the claim, the hand-off inbox, the reconcile scan, the advertisement
# and the channel, with room for one renewal line and the window's edges)
WINDOW_S = 13.0
LINES_BOUND = 16


async def test_a_worker_at_maxmemory_logs_each_failing_loop_once_per_interval_and_counts(
    small_redis: SmallRedis, small_processes: Processes, small_store: RunStore
) -> None:
    """Issue 35's attack: a worker at maxmemory logged ~86 warnings a second."""
    small_redis.allow(6_000_000)
    port = free_port()
    worker = small_processes.worker(
        LEASEHOLD_CONCURRENCY="4", LEASEHOLD_WORKER_METRICS_PORT=str(port)
    )
    for _ in range(8):  # four running (progress events), four queued (claims refused)
        await small_store.create(
            NewRun(handler="demo.sleep", input={"seconds": 60, "progress_every_s": 0.1})
        )
    await eventually(
        lambda: small_store.list_runs(limit=50),
        until=lambda page: sum(run.status == RunStatus.RUNNING for run in page.items) == 4,
        what="four runs running",
    )
    before = len(worker.log().splitlines())
    small_redis.set_max(small_redis.used_bytes() // 2)
    await asyncio.sleep(WINDOW_S)
    lines = worker.log().splitlines()[before:]
    warnings = [line for line in lines if " WARNING " in line or " ERROR " in line]
    assert small_redis.oom_refusals() > 0, "Redis was refusing writes meanwhile"
    assert 0 < len(warnings) <= LINES_BOUND, "\n".join(warnings)
    assert any("Redis is out of memory" in line for line in warnings)
    assert any("more like it in the last" in line for line in warnings), "\n".join(warnings)
    async with httpx.AsyncClient(timeout=10) as http:
        scraped = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    refused = {
        sample.labels["write"]: sample.value
        for family in text_string_to_metric_families(scraped)
        if family.name == "leasehold_worker_writes_refused"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["reason"] == "out_of_memory"
    }
    assert refused.get("handoff", 0) > 0 and refused.get("advertisement", 0) > 0, refused
    assert sum(refused.values()) > len(warnings), "refusals are counted, not logged"
    assert worker.alive()
