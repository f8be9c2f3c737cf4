"""A cancel pushed in the worker's blind spots still ends its run at once, not at a renewal.

Two windows where a worker used to drop a cancel push, leaving the run to the next
renewal (TTL/3): a run claimed before the worker's first subscription stood, and a
push read before the claim's reply that registers the run. A proxy between the
worker and Redis (:class:`~tests.support.proxies.HoldingProxy`) holds one message
to open each window every time. The lease TTL is long, so only the push can explain
a run that ends within the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes
from tests.support.proxies import HoldingProxy

LEASE_TTL_S = 90.0  # renewals every 30 s: a cancel they carry comes far too late
CANCELLED_WITHIN_S = LEASE_TTL_S / 3 / 2
WORKER_UP_S = 120.0  # a bound for a start-up that never comes, on a loaded machine
CLAIM_WINDOW_S = 1.5  # how long a worker that claims before subscribing is given to


@pytest.fixture
def proxy(redis_url: str) -> Iterator[HoldingProxy]:
    """A proxy to the session's Redis, for the worker alone (the test talks to Redis)."""
    port = urlsplit(redis_url).port
    assert port is not None
    started = HoldingProxy(port).start()
    yield started
    started.stop()


def long_run(tag: str = "cancel-push") -> NewRun:
    """A run that sleeps far past the test, until it is cancelled."""
    return NewRun(handler="test.record", input={"seconds": 600, "tag": tag})


async def status_of(run_store: RunStore, run_id: str) -> RunStatus:
    return (await run_store.get(run_id)).status


async def test_a_cancel_while_the_worker_subscribes_ends_the_run_at_once(
    processes: Processes, run_store: RunStore, proxy: HoldingProxy
) -> None:
    run_id = (await run_store.create(long_run())).run.id
    subscribe = proxy.hold(to_redis=True, marker=b"SUBSCRIBE")
    processes.worker(LEASEHOLD_REDIS_URL=proxy.url, LEASEHOLD_LEASE_TTL_S=str(LEASE_TTL_S))
    assert await asyncio.to_thread(subscribe.seen.wait, WORKER_UP_S), "the worker never subscribed"
    # the subscription is held: a worker that claims meanwhile would not hear the cancel
    with contextlib.suppress(AssertionError):  # still queued: the worker waits to subscribe
        await eventually(
            lambda: status_of(run_store, run_id),
            until=lambda status: status != RunStatus.QUEUED,
            timeout_s=CLAIM_WINDOW_S,
            interval_s=0.02,
            what="a claim before the subscription",
        )
    await run_store.cancel(run_id)
    subscribe.release()
    await wait_status(run_store, run_id, RunStatus.CANCELLED, timeout_s=CANCELLED_WITHIN_S)
    # and the worker claims once subscribed
    after = (await run_store.create(NewRun(handler="test.record", input={}))).run.id
    await wait_status(run_store, after, RunStatus.SUCCEEDED, timeout_s=WORKER_UP_S)


async def test_a_cancel_pushed_before_the_claim_reply_ends_the_run_at_once(
    processes: Processes, run_store: RunStore, proxy: HoldingProxy
) -> None:
    processes.worker(LEASEHOLD_REDIS_URL=proxy.url, LEASEHOLD_LEASE_TTL_S=str(LEASE_TTL_S))
    first = (await run_store.create(NewRun(handler="test.record", input={}))).run.id
    await wait_status(run_store, first, RunStatus.SUCCEEDED, timeout_s=WORKER_UP_S)  # up, idle
    tag = f"gap-{secrets.token_hex(6)}"
    # the claim's reply carries the run's input: held, so the worker has not registered it
    reply = proxy.hold(to_redis=False, marker=tag.encode(), unless=b"message")
    run_id = (await run_store.create(long_run(tag))).run.id
    assert await asyncio.to_thread(reply.seen.wait, WORKER_UP_S), "the run was never claimed"
    assert await status_of(run_store, run_id) == RunStatus.RUNNING
    pushed = proxy.watch(to_redis=False, marker=f"{run_id} ".encode())
    assert await run_store.cancel(run_id) == RunStatus.CANCELLING
    assert await asyncio.to_thread(pushed.wait, WORKER_UP_S), "the push never reached the worker"
    # the worker reads the push on its next loop pass: give it that before the reply
    await asyncio.sleep(0.3)
    reply.release()
    await wait_status(run_store, run_id, RunStatus.CANCELLED, timeout_s=CANCELLED_WITHIN_S)
