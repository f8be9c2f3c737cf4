"""A Leasehold deployment on any Redis URL, and the invariants a failover must keep.

:func:`deployment` gives a test a store on the URL (a cluster client for
``redis+cluster://``, sentinel discovery for ``redis+sentinel://``) and a
:class:`~tests.support.processes.Processes` whose workers and APIs get the same
URL and key prefix. :func:`assert_each_settled_exactly_once` is what every
failover test checks at the end: each run is terminal or explicitly parked, its
event stream ends with exactly one terminal event, and that event agrees with
the run's status (no run has two accepted terminal writes).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from app.models import PARKED_STATUSES, TERMINAL_EVENT_TYPES, Run, RunStatus
from app.settings import Settings
from app.store.lua.scripts import Scripts
from app.store.redis.connection import AsyncRedis, async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.processes import Processes, base_env

SETTLE_TIMEOUT_S = 90.0


@dataclass
class Deployment:
    """The test's view of one Leasehold deployment on one Redis URL."""

    url: str
    client: AsyncRedis
    store: RunStore
    processes: Processes


@asynccontextmanager
async def deployment(
    url: str, prefix: str, log_dir: Path, *, lease_ttl_s: float, **env: str
) -> AsyncIterator[Deployment]:
    """A store and a process launcher on ``url``; every child is reaped at the end."""
    client = async_client(url)
    store = RunStore.for_settings(client, Scripts(), Settings(prefix=prefix))
    processes = Processes({**base_env(url, prefix, lease_ttl_s=lease_ttl_s), **env}, log_dir)
    try:
        yield Deployment(url, client, store, processes)
    finally:
        processes.reap()
        await client.aclose()


async def submit(store: RunStore, queue: str, handler: str = "demo.echo", **params: object) -> str:
    """Create one run on ``queue``; returns its id."""
    new = NewRun(handler=handler, input=params, queue=queue)
    return (await store.create(new)).run.id


async def kinds(store: RunStore, run_id: str) -> list[str]:
    """The run's event types, oldest first."""
    return [event.type for event in await store.read_events(run_id)]


async def submit_retried(store: RunStore, queue: str, *, seconds: float) -> str:
    """A ``test.record`` run that is requeued, not orphaned, when its lease expires."""
    new = NewRun(
        handler="test.record",
        input={"seconds": seconds},
        queue=queue,
        on_lease_expired="retry",
        max_attempts=3,
    )
    return (await store.create(new)).run.id


async def wait_some_running(store: RunStore, ids: list[str], count: int) -> None:
    """Poll until at least ``count`` of the runs are running."""

    async def running() -> int:
        runs = await asyncio.gather(*(store.get(run_id) for run_id in ids))
        return sum(run.status == RunStatus.RUNNING for run in runs)

    await eventually(running, until=lambda n: n >= count, what=f"{count} runs running")


async def assert_each_settled_exactly_once(
    store: RunStore, ids: list[str], *, timeout_s: float = SETTLE_TIMEOUT_S
) -> Counter[str]:
    """Wait until every run is terminal or parked, then check its one terminal event.

    Reads go through the store's own client, which must itself ride out the
    failover (reconnect, refresh the slot map or ask the sentinels). Returns how
    many runs ended in each status.
    """

    async def settled() -> list[Run]:
        return list(await asyncio.gather(*(store.get(run_id) for run_id in ids)))

    runs = await eventually(
        settled,
        until=lambda runs: all(run.status.is_settled for run in runs),
        timeout_s=timeout_s,
        what="every run to end terminal or parked",
    )
    for run in runs:
        events = await kinds(store, run.id)
        terminal = [kind for kind in events if kind in TERMINAL_EVENT_TYPES]
        if run.status in PARKED_STATUSES:
            assert terminal == [], f"{run.id} is {run.status} but has {terminal}: {events}"
            continue
        assert terminal == [run.status.value], f"{run.id}: {run.status} with events {events}"
        assert events[-1] == run.status.value, f"{run.id}: events after the terminal: {events}"
    return Counter(run.status.value for run in runs)
