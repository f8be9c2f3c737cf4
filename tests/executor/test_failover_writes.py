"""Worker writes through a failover: a real Redis demoted to a replica, then promoted.

After a failover the node a worker still talks to can be a replica for a
moment: every write is answered ``READONLY``. That used to escape the event
flusher (it retried only dropped connections) while the courier retried it:
one idea of "transient" per loop. Now every loop asks the one definition
(``app/store/redis/refusals.py``) and waits by the one policy (``app/retry.py``), and
each write below lands once the node takes writes again.

The Redis is the test's own (``small_redis``, its maxmemory left unset; never
the session's: demoting that one would fail every other test).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from app.executor.courier import Courier
from app.executor.effects import EffectLedger
from app.executor.events import EventSink
from app.executor.slots import Slots
from app.models import RunStatus
from app.settings import Settings
from app.store.codec import dumps
from app.store.leases.store import ClaimedRun, Lease, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.progress.store import ProgressStore
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.memory import SmallRedis
from tests.support.polling import eventually

OWNER = "w-failover"
# nothing listens on port 1: a replica of it stays read-only, its data kept (no sync happens)
NO_PRIMARY = ("127.0.0.1", 1)


@dataclass
class Node:
    """The worker's stores on the test's own Redis, and an admin connection to demote it."""

    admin: redis.Redis
    runs: RunStore
    leases: LeaseStore
    progress: ProgressStore

    def readonly_refusals(self) -> int:
        """How many commands Redis has answered READONLY since it started (INFO errorstats)."""
        entry = self.admin.info("errorstats").get("errorstat_READONLY")
        return int(entry["count"]) if isinstance(entry, dict) else 0

    @contextmanager
    def demoted(self) -> Iterator[None]:
        """A failover demoted the node the worker talks to; at the end it is a primary again."""
        self.admin.replicaof(*NO_PRIMARY)
        try:
            yield
        finally:
            self.admin.replicaof("NO", "ONE")

    async def refused_twice(self) -> None:
        """Wait until a write was answered READONLY and tried again (so: retried)."""
        await eventually(
            lambda: asyncio.sleep(0, self.readonly_refusals()),
            until=lambda n: n >= 2,
            what="Redis to answer READONLY twice",
        )

    async def claim(self) -> ClaimedRun:
        """Create a run and claim it as OWNER (before any demotion)."""
        await self.runs.create(NewRun(handler="demo.echo", input={}))
        return (await self.leases.claim("default", OWNER, 1)).runs[0]


@pytest.fixture
async def node(
    small_redis: SmallRedis, prefix: str, scripts: Scripts, tmp_path: Path
) -> AsyncIterator[Node]:
    """Stores on the test's own Redis, leases long enough to outlive the demotion."""
    settings = Settings(
        redis_url=small_redis.url, prefix=prefix, lease_ttl_s=60, state_dir=tmp_path / "state"
    )
    client = async_client(small_redis.url)
    admin = small_redis.client()
    try:
        yield Node(
            admin,
            RunStore.for_settings(client, scripts, settings),
            LeaseStore.for_settings(client, scripts, settings),
            ProgressStore.for_settings(client, scripts, settings),
        )
    finally:
        admin.close()
        await client.aclose()


def sink_for(node: Node, run: ClaimedRun, lost: list[str]) -> EventSink:
    return EventSink(
        node.leases, run.lease, max_event_bytes=1024, on_lost=lambda: lost.append("lost")
    )


async def test_a_readonly_reply_during_an_event_flush_is_retried_and_the_event_lands(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    run = await node.claim()
    lost: list[str] = []
    sink = sink_for(node, run, lost)
    with caplog.at_level(logging.WARNING, logger="app.executor.events"):
        with node.demoted():
            await sink.add("progress", {"step": 1})
            await node.refused_twice()
        await asyncio.wait_for(sink.flush(), timeout=30)
    retries = [r.getMessage() for r in caplog.records if "event append failed" in r.getMessage()]
    assert retries, "no retry was logged"
    assert all("Redis is read-only" in line and "retrying in" in line for line in retries)
    events = await node.runs.read_events(run.id)
    assert [event.type for event in events] == ["created", "claimed", "progress"]
    assert events[-1].data == {"step": 1}
    assert sink.last_event_id == events[-1].id
    assert (sink.dropped, lost) == (0, [])


async def test_a_checkpoint_written_while_the_node_is_a_replica_lands_after_promotion(
    node: Node,
) -> None:
    run = await node.claim()
    lost: list[str] = []
    ledger = EffectLedger(
        node.progress,
        run.lease,
        sink=sink_for(node, run, lost),
        max_bytes=1024,
        on_lost=lambda: lost.append("lost"),
        on_parked=lambda: lost.append("parked"),
    )
    with node.demoted():
        write = asyncio.create_task(ledger.checkpoint({"page": 7}))
        await node.refused_twice()
        assert not write.done(), "the checkpoint gave up while the node was read-only"
    assert await asyncio.wait_for(write, timeout=30) == {"page": 7}
    assert lost == []
    kinds = [event.type for event in await node.runs.read_events(run.id)]
    assert kinds == ["created", "claimed", "checkpoint"]
    # the next attempt resumes from it
    await node.leases.release([Lease("default", run.id, OWNER, run.fence)], "drain")
    again = (await node.leases.claim("default", "w-next", 1)).runs[0]
    assert (again.id, again.state) == (run.id, {"page": 7})


async def test_a_terminal_write_sent_while_the_node_is_a_replica_lands_after_promotion(
    node: Node,
) -> None:
    started: list[ClaimedRun] = []
    courier = Courier(
        queue="default",
        store=node.leases,
        owner_id=OWNER,
        slots=Slots(1),
        start_run=lambda run, _sent_at: started.append(run),
        batch_max=1,
        idle_wake_s=0.2,
    )
    run_id = (await node.runs.create(NewRun(handler="demo.echo", input={}))).run.id
    courier.start()
    try:
        await eventually(lambda: asyncio.sleep(0, started), until=bool, what="the run claimed")
        outcome = Outcome(started[0].lease, RunStatus.SUCCEEDED, output_json=dumps({"ok": 1}))
        with node.demoted():
            finish = asyncio.create_task(courier.finish(outcome))
            await node.refused_twice()
            assert not finish.done(), "the terminal write was settled while the node was read-only"
        assert await asyncio.wait_for(finish, timeout=30) == LeaseAnswer.OK
    finally:
        await courier.close()
    run = await node.runs.get(run_id)
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, {"ok": 1})
    kinds = [event.type for event in await node.runs.read_events(run_id)]
    assert kinds == ["created", "claimed", "succeeded"]
