"""The courier's hand-off registration while a handed-off run executes, against a real Redis.

A hand-off consumes the worker's registration. A worker with slots still free registers
again soon after the run started (``REREGISTER_S``), not only once the run ended: the
next create hands its run off too, rather than taking the wake message and a claim. A
run that ends before then re-registers with its finish trip, and the timer sends
nothing more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from app.executor.courier import REREGISTER_S, Courier
from app.executor.slots import Slots
from app.models import RunStatus
from app.store.leases.store import ClaimedRun, LeaseStore, Outcome
from app.store.lua.transition import LeaseAnswer
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.executor.test_courier_claims import CountingClaims, counting
from tests.support.polling import eventually, wait_status

OWNER = "w-courier-handoff"
Q = "default"
# its renewal (the courier's timer, at half its life) comes long after the test
HANDOFF_MS = 600_000
# far above REREGISTER_S however loaded the machine, far below a renewal
AGAIN_WITHIN_S = 10.0


class HeldRuns:
    """A worker's run starts: each run holds its slot until the test lets it finish."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.started: list[ClaimedRun] = []
        self.release: dict[str, asyncio.Event] = {}
        self.hold = True  # False: a run finishes at once, as a no-op handler does
        self.courier: Courier | None = None
        self._tasks: set[asyncio.Task[LeaseAnswer]] = set()

    def start_run(self, run: ClaimedRun, _sent_at: float) -> None:
        self.started.append(run)
        self.release[run.id] = asyncio.Event()
        if not self.hold:
            self.release[run.id].set()
        task = asyncio.get_running_loop().create_task(self._finish(run))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, run: ClaimedRun) -> LeaseAnswer:
        await self.release[run.id].wait()
        assert self.courier is not None
        self.slots.give_back(1)
        self.courier.kick()
        return await self.courier.finish(Outcome(run.lease, RunStatus.SUCCEEDED))


@asynccontextmanager
async def handoff_courier(
    lease_store: LeaseStore, redis_client: aioredis.Redis
) -> AsyncIterator[tuple[CountingClaims, Courier, HeldRuns]]:
    """A started courier of 8 slots, registered for a hand-off after its first claim;
    closed on the way out."""
    store = counting(lease_store)
    slots = Slots(8)
    runs = HeldRuns(slots)
    courier = runs.courier = Courier(
        queue=Q,
        store=store,
        owner_id=OWNER,
        slots=slots,
        start_run=runs.start_run,
        batch_max=50,
        idle_wake_s=60.0,  # no safety-net claim inside the test
        trips_in_flight=2,
        handoff_ms=HANDOFF_MS,
    )
    courier.start()
    try:
        await eventually(
            lambda: registered(lease_store, redis_client), until=lambda n: n == 1, what="registered"
        )
        await eventually(lambda: asyncio.sleep(0, store.in_flight), until=lambda n: n == 0)
        yield store, courier, runs
    finally:
        await courier.close()


async def past_the_timer(store: CountingClaims) -> None:
    """Wait past the re-registration timer, until no trip is in flight."""
    await asyncio.sleep(5 * REREGISTER_S)
    await eventually(lambda: asyncio.sleep(0, store.in_flight), until=lambda n: n == 0)


async def registered(lease_store: LeaseStore, redis_client: aioredis.Redis) -> int:
    return int(await redis_client.zcard(lease_store.keys(Q).handoff_idle))


async def hand_off(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, courier: Courier
) -> str:
    """Create a run, see the create push it to the worker's inbox, and give the row to the
    courier as the worker's inbox does."""
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    raw = await redis_client.lpop(lease_store.keys(Q).handoff_inbox(OWNER))
    assert raw is not None, "the create did not hand its run off"
    claimed = lease_store.handed_off(Q, OWNER, raw)
    assert claimed.id == run_id
    courier.take_handoff(claimed, time.monotonic())
    return run_id


async def test_a_worker_registers_again_while_its_handed_off_run_still_runs(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    async with handoff_courier(lease_store, redis_client) as (store, courier, runs):
        first = await hand_off(run_store, lease_store, redis_client, courier)
        assert await registered(lease_store, redis_client) == 0  # the hand-off consumed it
        # the run still holds its slot: the registration is made again, soon
        started_at = time.monotonic()
        await eventually(
            lambda: registered(lease_store, redis_client),
            until=lambda n: n == 1,
            timeout_s=AGAIN_WITHIN_S,
            what="registered again while the run runs",
        )
        assert time.monotonic() - started_at >= REREGISTER_S / 2
        await eventually(lambda: asyncio.sleep(0, store.in_flight), until=lambda n: n == 0)
        # so the next run is handed off too, while the first still runs
        second = await hand_off(run_store, lease_store, redis_client, courier)
        assert [run.id for run in runs.started] == [first, second]
        for run_id in (first, second):
            runs.release[run_id].set()
            await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        await eventually(
            lambda: registered(lease_store, redis_client), until=lambda n: n == 1, what="idle"
        )


async def test_a_run_that_ends_first_registers_with_its_finish_and_no_extra_claim(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    async with handoff_courier(lease_store, redis_client) as (store, courier, runs):
        runs.hold = False
        at_start = len(store.claims)
        run_id = await hand_off(run_store, lease_store, redis_client, courier)
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        await eventually(
            lambda: registered(lease_store, redis_client), until=lambda n: n == 1, what="again"
        )
        await past_the_timer(store)
        # one claim: the finish trip's, which made the registration again
        assert len(store.claims) - at_start == 1, f"claims: {store.claims[at_start:]}"


async def test_a_draining_worker_does_not_register_again(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    async with handoff_courier(lease_store, redis_client) as (store, courier, runs):
        run_id = await hand_off(run_store, lease_store, redis_client, courier)
        courier.stop_claiming()
        await past_the_timer(store)
        assert await registered(lease_store, redis_client) == 0
        runs.release[run_id].set()
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        await courier.withdraw()
        assert await registered(lease_store, redis_client) == 0
