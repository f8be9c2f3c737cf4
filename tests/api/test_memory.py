"""Admission control and Redis refusals on the request path, against a small real Redis.

What a client sees while Redis fills up: creates turn into 503
``admission-refused`` with ``Retry-After`` before Redis refuses anything; a
Redis that refuses a write all the same (at maxmemory, read-only) is a typed
503, never a 500; and ``/readyz`` and ``/metrics`` say how full it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.stack.embedded import free_port
from tests.support.memory import HIGH_WATER, SmallRedis, memory_settings, start_api

FILLER = "x" * 20_000  # 20 KB inputs, as in the reproduction
HEADROOM_BYTES = 4_000_000


@pytest.fixture
async def full_api(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """An API on the small Redis, with a 60 % high-water mark and a 50 ms memory cache."""
    async with start_api(memory_settings(small_redis, prefix, tmp_path)) as client:
        yield client


def filler(index: int) -> dict[str, object]:
    return {"handler": "demo.echo", "queue": "filler", "input": {"message": f"{index}{FILLER}"}}


async def fill_until_refused(api: httpx.AsyncClient, limit: int = 2_000) -> list[httpx.Response]:
    """POST 20 KB runs until ten in a row are refused; every answer, in order.

    One refusal can come from the API's estimate of what it admitted since its
    last reading; ten in a row, across readings, only from Redis's real use.
    """
    answers: list[httpx.Response] = []
    for index in range(limit):
        answers.append(await api.post("/runs", json=filler(index)))
        if len(answers) >= 10 and all(a.status_code != 201 for a in answers[-10:]):
            return answers
    raise AssertionError(f"{limit} creates and never ten refused in a row")


def sample(metrics: str, name: str) -> float:
    """The value of one sample in Prometheus text (name with its labels)."""
    for line in metrics.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def test_creates_turn_into_503_with_retry_after_before_redis_refuses_anything(
    full_api: httpx.AsyncClient, small_redis: SmallRedis
) -> None:
    max_bytes = small_redis.allow(HEADROOM_BYTES)
    answers = await fill_until_refused(full_api)
    refusals = [a for a in answers if a.status_code != 201]
    assert {a.status_code for a in answers} == {201, 503}
    assert answers.index(refusals[0]) > 10, "refused long before the mark"
    assert {a.json()["type"].rsplit("/", 1)[1] for a in refusals} == {"admission-refused"}
    refused = refusals[0]
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/admission-refused")
    assert int(refused.headers["Retry-After"]) >= 1
    # refused by Leasehold while Redis still had room: Redis itself never said OOM
    assert small_redis.oom_refusals() == 0
    assert small_redis.used_bytes() < max_bytes
    # clearly past the mark (not hovering at it), every create is refused and writes nothing
    small_redis.set_max(int(small_redis.used_bytes() / (HIGH_WATER + 0.15)))
    listed_before = (await full_api.get("/runs", params={"queue": "filler", "limit": 500})).json()
    again = [await full_api.post("/runs", json=filler(i)) for i in range(20)]
    assert {a.status_code for a in again} == {503}
    assert {a.json()["type"].rsplit("/", 1)[1] for a in again} == {"admission-refused"}
    listed_after = (await full_api.get("/runs", params={"queue": "filler", "limit": 500})).json()
    assert listed_after["items"] == listed_before["items"]
    assert small_redis.oom_refusals() == 0


async def test_bad_input_is_still_a_4xx_when_creates_are_refused(
    full_api: httpx.AsyncClient, small_redis: SmallRedis
) -> None:
    small_redis.allow(HEADROOM_BYTES)
    await fill_until_refused(full_api)
    unknown = await full_api.post("/runs", json={"handler": "no.such", "input": {}})
    malformed = await full_api.post("/runs", json={"handler": 7})
    assert unknown.status_code == 422
    assert malformed.status_code == 422


async def test_readyz_and_metrics_report_memory_pressure(
    full_api: httpx.AsyncClient, small_redis: SmallRedis
) -> None:
    max_bytes = small_redis.allow(HEADROOM_BYTES)
    calm = (await full_api.get("/readyz")).json()
    assert calm["memory"]["max_bytes"] == max_bytes
    assert calm["memory"]["creates_refused"] is False
    assert not [p for p in calm["problems"] if "memory" in p]
    await fill_until_refused(full_api)
    # clearly past the mark, not hovering at it (client buffers come and go)
    max_bytes = int(small_redis.used_bytes() / (HIGH_WATER + 0.15))
    small_redis.set_max(max_bytes)
    ready = await full_api.get("/readyz")
    assert ready.status_code == 200, "pressure is a problem to report, not unreadiness"
    body = ready.json()
    assert body["memory"]["creates_refused"] is True
    assert body["memory"]["high_water"] == HIGH_WATER
    assert any("past the high-water mark" in p for p in body["problems"])
    metrics = (await full_api.get("/metrics")).text
    assert sample(metrics, "leasehold_redis_memory_max_bytes") == max_bytes
    assert sample(metrics, "leasehold_redis_memory_used_bytes") >= HIGH_WATER * max_bytes
    assert sample(metrics, 'leasehold_queue_runs_stored{queue="filler"}') > 10
    assert sample(metrics, "leasehold_creates_refused_total") >= 1


async def test_readyz_says_when_no_maxmemory_is_configured(
    full_api: httpx.AsyncClient, small_redis: SmallRedis
) -> None:
    small_redis.set_max(0)
    body = (await full_api.get("/readyz")).json()
    assert body["status"] == "ready"
    assert body["memory"]["max_bytes"] == 0 and body["memory"]["creates_refused"] is False
    assert any("maxmemory is not set" in p for p in body["problems"])
    assert (await full_api.post("/runs", json=filler(0))).status_code == 201


async def test_a_write_redis_refuses_for_memory_is_a_typed_503_and_reads_still_work(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    # the memory cache outlives the test: admission still believes the first reading,
    # so the create reaches Redis, which refuses it itself
    settings = memory_settings(small_redis, prefix, tmp_path, check_interval_s=60)
    async with start_api(settings) as api:
        small_redis.allow(HEADROOM_BYTES)
        first = await api.post("/runs", json=filler(0))
        assert first.status_code == 201
        small_redis.set_max(small_redis.used_bytes() // 2)
        refused = await api.post("/runs", json=filler(1))
        assert refused.status_code == 503
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"].endswith("/redis-out-of-memory")
        assert refused.headers["Retry-After"]
        assert small_redis.oom_refusals() >= 1
        # reads and cancels go on at maxmemory
        run_id = first.json()["id"]
        assert (await api.get(f"/runs/{run_id}")).status_code == 200
        cancelled = await api.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        ready = (await api.get("/readyz")).json()
        assert ready["memory"]["creates_refused"] is True
        assert any("at maxmemory" in p for p in ready["problems"])


async def test_a_write_to_a_read_only_redis_is_a_typed_503(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    async with start_api(memory_settings(small_redis, prefix, tmp_path)) as api:
        with small_redis.client() as client:
            # a replica of a primary that does not exist: read-only, data kept
            client.replicaof("127.0.0.1", free_port())
            try:
                refused = await api.post("/runs", json=filler(0))
            finally:
                client.replicaof("NO", "ONE")
        assert refused.status_code == 503
        assert refused.json()["type"].endswith("/redis-read-only")
        assert refused.headers["Retry-After"]
