"""Every write path is admitted, and every stop control works when Redis is full.

The attacks of the tenants issue's High and Medium findings, as tests against a
small real Redis: one-second schedules with large inputs and a backfill could
write past the memory mark and then could not be stopped (pause and delete
answered 503); a bulk re-run wrote until Redis was full and left an operation
record for a week even when nothing matched; signals were never admitted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from app.api.operations import RetryDrivers
from app.models.read import RetryFilter
from app.reconciler.schedule_pass import SchedulePass
from app.store.admission import MemoryAdmission
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.store import RunStore
from app.telemetry.metrics import WORKER_REGISTRY
from tests.support.memory import HIGH_WATER, SmallRedis, memory_settings, start_api
from tests.support.polling import eventually

BIG = "x" * 50_000  # a 50 KB schedule input: each fire is a 50 KB run
HEADROOM_BYTES = 6_000_000


def schedule(schedule_id: str, **spec: Any) -> dict[str, Any]:
    run = {"handler": "demo.echo", "queue": "filler", "input": {"message": BIG}}
    return {"id": schedule_id, "run": run, "interval_s": 1, "overlap": "allow", **spec}


def refused_fires() -> float:
    total = 0.0
    for metric in WORKER_REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "leasehold_schedule_fires_total" and (
                sample.labels.get("outcome") == "refused"
            ):
                total += sample.value
    return total


async def stored_runs(client: aioredis.Redis, prefix: str) -> int:
    return len([key async for key in client.scan_iter(f"{prefix}:{{filler}}:run:*", count=1000)])


async def test_schedules_cannot_fill_redis_and_can_be_stopped_when_it_is_full(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    settings = memory_settings(small_redis, prefix, tmp_path)
    client = async_client(small_redis.url)
    reconciler = SchedulePass.for_settings(
        RunStore.for_settings(client, Scripts(), settings), settings
    )
    max_bytes = small_redis.allow(HEADROOM_BYTES)
    refused_before = refused_fires()
    try:
        async with start_api(settings) as api:
            for n in range(10):
                made = await api.post("/schedules", json=schedule(f"fill-{n}"))
                assert made.status_code == 201, made.text

            async def fire_until_refused() -> float:
                await reconciler.tick()
                return refused_fires() - refused_before

            # ten fires a second of 50 KB each: the mark comes within seconds, and then
            # the reconciler stops firing instead of writing on
            await eventually(
                fire_until_refused, until=lambda n: n >= 20, timeout_s=60, what="fires refused"
            )
            stored = await stored_runs(client, prefix)
            for _ in range(10):
                await reconciler.tick()
                await asyncio.sleep(0.1)
            assert await stored_runs(client, prefix) <= stored + 1  # one admitted at the edge
            assert small_redis.oom_refusals() == 0, "Redis itself never had to refuse"
            assert small_redis.used_bytes() < max_bytes
            # a create as big as a fire is refused too: the same admission
            big_run = {"handler": "demo.echo", "queue": "filler", "input": {"message": BIG}}
            assert (await api.post("/runs", json=big_run)).status_code == 503

            # now Redis itself is full: the stop controls still work
            small_redis.set_max(small_redis.used_bytes() - 100_000)
            paused = await api.post("/schedules/fill-0/pause")
            assert paused.status_code == 200, paused.text
            assert paused.json()["paused"] is True
            deleted = await api.delete("/schedules/fill-1")
            assert deleted.status_code == 204, deleted.text
            assert (await api.get("/schedules/fill-1")).status_code == 404
            patched = await api.patch("/schedules/fill-2", json={"paused": True})
            assert patched.status_code == 200, patched.text
            assert small_redis.oom_refusals() == 0, "no stop control was refused"
    finally:
        await client.aclose()


async def test_a_backfill_is_judged_on_all_it_would_write_and_refused_whole(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    small_redis.allow(HEADROOM_BYTES)
    client = async_client(small_redis.url)
    try:
        async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
            made = await api.post("/schedules", json=schedule("back", paused=True))
            assert made.status_code == 201, made.text
            # 200 fire times of 50 KB runs: ~20 MB, far past the mark although memory is low
            too_big = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:03:19Z"}
            refused = await api.post("/schedules/back/backfill", json=too_big)
            assert refused.status_code == 503, refused.text
            assert refused.json()["type"].endswith("/admission-refused")
            assert refused.headers["Retry-After"]
            assert await stored_runs(client, prefix) == 0, "refused whole: no run written"
            fits = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:04Z"}
            fired = await api.post("/schedules/back/backfill", json=fits)
            assert fired.status_code == 200, fired.text
            created = fired.json()["created"]
            assert len(created) in (4, 5)  # an interval anchored at its create: 4 or 5 in 5 s
            assert await stored_runs(client, prefix) == len(created)
    finally:
        await client.aclose()


async def test_bulk_retry_and_signals_are_refused_past_the_mark_and_write_nothing(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    small_redis.allow(HEADROOM_BYTES)
    client = async_client(small_redis.url)
    try:
        async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
            run = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()
            cancelled = await api.post("/runs", json={"handler": "demo.echo", "input": {}})
            await api.post(f"/runs/{cancelled.json()['id']}/cancel")
            # clearly past the mark, as /readyz (which reads memory afresh) says
            small_redis.set_max(int(small_redis.used_bytes() / (HIGH_WATER + 0.15)))
            assert (await api.get("/readyz")).json()["memory"]["creates_refused"] is True
            operations_before = [k async for k in client.scan_iter(f"{prefix}:operation:*")]
            bulk = await api.post("/runs/retry", json={"status": ["cancelled"]})
            assert bulk.status_code == 503, bulk.text
            assert bulk.json()["type"].endswith("/admission-refused")
            assert [k async for k in client.scan_iter(f"{prefix}:operation:*")] == (
                operations_before
            ), "no operation record for a refused bulk retry"
            signal = await api.post(f"/runs/{run['id']}/signals/go", json={"payload": {"a": 1}})
            assert signal.status_code == 503, signal.text
            assert signal.headers["Retry-After"]
            assert await client.exists(f"{prefix}:{{default}}:waits:{run['id']}") == 0
    finally:
        await client.aclose()


async def test_a_bulk_retry_that_matches_nothing_is_kept_an_hour_not_a_week(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    client = async_client(small_redis.url)
    try:
        async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
            started = await api.post("/runs/retry", json={"handler": "no.such.handler"})
            assert started.status_code == 202, started.text
            operation_id = started.json()["id"]
            done = await eventually(
                lambda: api.get(f"/operations/{operation_id}"),
                until=lambda r: r.json()["status"] == "done",
                what="the empty operation done",
            )
            assert done.json()["retried"] == 0
            ttl_ms = await client.pttl(f"{prefix}:operation:{operation_id}")
            assert 0 < ttl_ms <= 3_600_000
    finally:
        await client.aclose()


def drivers_on(small_redis: SmallRedis, prefix: str, tmp_path: Path) -> RetryDrivers:
    """A bulk-retry driver of the test's own, one run per step, memory read every 50 ms."""
    settings = memory_settings(small_redis, prefix, tmp_path).model_copy(
        update={"retry_batch_size": 1}
    )
    client = async_client(small_redis.url)
    admission = MemoryAdmission(client, high_water=HIGH_WATER, interval_s=0.05)
    return RetryDrivers.for_settings(
        RunStore.for_settings(client, Scripts(), settings), settings, admission
    )


async def cancelled_runs(api: httpx.AsyncClient, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        made = await api.post("/runs", json={"handler": "demo.echo", "input": {}})
        ids.append(made.json()["id"])
        assert (await api.post(f"/runs/{ids[-1]}/cancel")).status_code == 202
    return ids


async def test_a_bulk_retry_step_waits_for_memory_and_goes_on_when_it_frees(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    max_bytes = small_redis.allow(HEADROOM_BYTES)
    drivers = drivers_on(small_redis, prefix, tmp_path)
    try:
        async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
            await cancelled_runs(api, 3)
            progress = await drivers.operations.create(RetryFilter(status=["cancelled"]), limit=10)
            await drivers.start(progress)
            small_redis.set_max(int(small_redis.used_bytes() / (HIGH_WATER + 0.15)))
            operation_id = progress.operation_id
            waiting = await eventually(
                lambda: api.get(f"/operations/{operation_id}"),
                until=lambda r: "waiting for Redis memory" in (r.json()["last_error"] or ""),
                what="the step waiting for memory",
            )
            assert waiting.json()["status"] == "running", "a waiting operation is not stalled"
            retried_while_full = waiting.json()["retried"]
            await asyncio.sleep(0.5)
            assert (await api.get(f"/operations/{operation_id}")).json()["retried"] == (
                retried_while_full
            ), "nothing re-run while past the mark"
            small_redis.set_max(max_bytes)
            done = await eventually(
                lambda: api.get(f"/operations/{operation_id}"),
                until=lambda r: r.json()["status"] == "done",
                what="the operation done once memory freed",
            )
            assert done.json()["retried"] == 3
            assert done.json()["last_error"] is None
    finally:
        await drivers.close()
        await drivers.runs.client.aclose()


async def test_a_cancel_of_a_bulk_retry_works_when_redis_is_full(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    small_redis.allow(HEADROOM_BYTES)
    drivers = drivers_on(small_redis, prefix, tmp_path)
    try:
        async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
            await cancelled_runs(api, 2)
            progress = await drivers.operations.create(RetryFilter(status=["cancelled"]), limit=10)
            small_redis.set_max(small_redis.used_bytes() - 100_000)  # Redis refuses writes
            cancelled = await api.post(f"/operations/{progress.operation_id}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            assert cancelled.json()["status"] == "cancelled"
            assert cancelled.json()["retried"] == 0
    finally:
        await drivers.runs.client.aclose()


async def test_purge_and_undeclare_work_when_redis_is_full(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    small_redis.allow(HEADROOM_BYTES)
    async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
        declared = await api.put("/queues/spare")
        assert declared.status_code in (200, 201), declared.text
        ended = await cancelled_runs(api, 3)
        small_redis.set_max(small_redis.used_bytes() - 100_000)  # Redis refuses writes
        purged = await api.post("/runs/purge", json={"status": "cancelled"})
        assert purged.status_code == 200, purged.text
        assert sorted(purged.json()["ids"]) == sorted(ended)
        undeclared = await api.delete("/queues/spare")
        assert undeclared.status_code == 204, undeclared.text
        assert small_redis.oom_refusals() == 0, "no stop control was refused"
