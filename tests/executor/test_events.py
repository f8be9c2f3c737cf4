"""The event flusher through a failover: a real Redis demoted to a replica, then promoted.

After a failover the node a worker still talks to can be a replica for a
moment: every write is answered ``READONLY``. That used to escape the event
flusher (it retried only dropped connections) while the courier retried it:
one idea of "transient" per loop. Now both ask the one definition, and the
handler's event lands once a primary takes writes again.

The Redis is the test's own (never the session's: demoting that one would fail
every other test), started fresh for this test.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from app.embedded import EmbeddedRedis
from app.executor.events import EventSink
from app.settings import Settings
from app.store.connection import AsyncRedis, async_client
from app.store.leases import ClaimedRun, LeaseStore
from app.store.runs import NewRun, RunStore
from app.store.scripts import Scripts
from tests.support.polling import eventually

OWNER = "w-events"
# nothing listens on port 1: a replica of it stays read-only, its data kept (no sync ever happens)
NO_PRIMARY = ("127.0.0.1", 1)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A fresh redis-server for this test alone."""
    server = EmbeddedRedis(data_dir=tmp_path / "own-redis", appendonly=False, log_file=None)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def own_client(own_redis: EmbeddedRedis) -> AsyncIterator[AsyncRedis]:
    """The worker's client on that server."""
    client = async_client(own_redis.url)
    yield client
    await client.aclose()


def readonly_refusals(admin: redis.Redis) -> int:
    """How many commands Redis has answered READONLY since it started (INFO errorstats)."""
    entry = admin.info("errorstats").get("errorstat_READONLY")
    return int(entry["count"]) if isinstance(entry, dict) else 0


async def test_a_readonly_reply_during_an_event_flush_is_retried_and_the_event_lands(
    own_redis: EmbeddedRedis,
    own_client: AsyncRedis,
    prefix: str,
    scripts: Scripts,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        redis_url=own_redis.url, prefix=prefix, lease_ttl_s=60, state_dir=tmp_path / "state"
    )
    run_store = RunStore.for_settings(own_client, scripts, settings)
    lease_store = LeaseStore.for_settings(own_client, scripts, settings)
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    claimed = await lease_store.claim("default", OWNER, 1)
    run: ClaimedRun = claimed.runs[0]
    lost: list[bool] = []
    sink = EventSink(
        lease_store, run, owner=OWNER, max_event_bytes=1024, on_lost=lambda: lost.append(True)
    )
    admin = redis.Redis.from_url(own_redis.url, decode_responses=True)
    try:
        admin.replicaof(*NO_PRIMARY)  # a failover demoted the node the worker talks to
        with caplog.at_level(logging.WARNING, logger="app.executor.events"):
            await sink.add("progress", {"step": 1})
            await eventually(
                lambda: asyncio.sleep(0, readonly_refusals(admin)),
                until=lambda n: n >= 2,
                what="Redis to answer the append READONLY, and the flusher to try again",
            )
            admin.replicaof("NO", "ONE")  # the node is a primary again
            await asyncio.wait_for(sink.flush(), timeout=30)
    finally:
        admin.close()
    retries = [r.getMessage() for r in caplog.records if "event append failed" in r.getMessage()]
    assert retries, "no retry was logged"
    assert all("Redis is read-only" in line and "retrying in" in line for line in retries)
    events = await run_store.read_events(run_id)
    assert [event.type for event in events] == ["created", "claimed", "progress"]
    assert events[-1].data == {"step": 1}
    assert sink.last_event_id == events[-1].id
    assert sink.dropped == 0
    assert not lost
