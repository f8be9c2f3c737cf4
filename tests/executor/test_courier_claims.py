"""How many claims the courier sends, against a real Redis.

With two round trips in flight, a wake must not make both trips claim: an idle
worker woken for one run sends one claim, in the loop pass the wake came in, and
once the run is done one finish (both trips claiming made it 3.27 round trips per
run at 50 runs/s instead of 2.26). Under a backlog both trips must keep claiming,
so that Redis leases one share while the worker runs the other.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.executor.courier import Courier
from app.executor.slots import Slots
from app.models import RunStatus
from app.store.leases.store import Claim, ClaimedRun, LeaseStore, Outcome
from app.store.lua.transition import LeaseAnswer
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually, wait_status

OWNER = "w-courier-claims"


class CountingClaims(LeaseStore):
    """A store that records every claim the courier sends, and how many were in flight."""

    delay_s = 0.0  # a slower round trip (a Redis farther away) makes trips overlap
    claims: list[int]
    in_flight = 0
    most_in_flight = 0

    async def finish_and_claim(self, *args: Any, **kwargs: Any) -> tuple[list[LeaseAnswer], Claim]:
        """Count the claim (its count, the courier's fourth argument, > 0), then run the trip."""
        count = args[3]
        if count:
            self.claims.append(count)
        self.in_flight += bool(count)
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            return await super().finish_and_claim(*args, **kwargs)
        finally:
            self.in_flight -= bool(count)


def counting(lease_store: LeaseStore, delay_s: float = 0.0) -> CountingClaims:
    store = CountingClaims(lease_store.ctx)
    store.claims, store.delay_s = [], delay_s
    return store


def finishing_courier(store: LeaseStore, slots: Slots, started: list[ClaimedRun]) -> Courier:
    """A courier whose runs end at once, the way the worker ends a no-op handler: the slot
    goes back, then the outcome is handed to the courier."""
    tasks: set[asyncio.Task[LeaseAnswer]] = set()

    def start_run(run: ClaimedRun, _sent_at: float) -> None:
        started.append(run)
        task = asyncio.get_running_loop().create_task(finish(run))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def finish(run: ClaimedRun) -> LeaseAnswer:
        slots.give_back(1)
        courier.kick()
        return await courier.finish(Outcome(run.lease, RunStatus.SUCCEEDED))

    courier = Courier(
        queue="default",
        store=store,
        owner_id=OWNER,
        slots=slots,
        start_run=start_run,
        batch_max=50,
        idle_wake_s=60.0,  # no safety-net claim inside the test
        trips_in_flight=2,
    )
    return courier


async def idle_courier(
    lease_store: LeaseStore, capacity: int
) -> tuple[CountingClaims, Courier, list[ClaimedRun]]:
    """A started courier whose start-up claim (on an empty queue) was answered."""
    store = counting(lease_store)
    started: list[ClaimedRun] = []
    courier = finishing_courier(store, Slots(capacity), started)
    courier.start()
    try:
        await eventually(lambda: asyncio.sleep(0, store.claims), until=bool, what="first claim")
        await eventually(lambda: asyncio.sleep(0, store.in_flight), until=lambda n: n == 0)
    except BaseException:
        await courier.close()
        raise
    return store, courier, started


async def test_an_idle_courier_sends_one_claim_per_wake_within_one_loop_pass(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    store, courier, started = await idle_courier(lease_store, 50)
    try:
        at_start = len(store.claims)
        runs = 5
        for n in range(runs):
            run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
            courier.notify_ready()  # the create's wake message, as the listener hands it on
            await asyncio.sleep(0)  # the listener yields once: the claim's trip runs then
            assert len(store.claims) - at_start == n + 1, "the claim waited for a loop pass"
            await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        await eventually(
            lambda: asyncio.sleep(0, store.in_flight), until=lambda n: n == 0, what="idle"
        )
    finally:
        await courier.close()
    assert len(started) == runs
    assert len(store.claims) - at_start == runs, f"claims per wake: {store.claims[at_start:]}"
    courier.notify_ready()  # a wake after close (the listener outlived it) sends nothing
    await asyncio.sleep(0)
    assert len(store.claims) - at_start == runs


async def test_under_a_backlog_both_trips_in_flight_claim(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    runs = 40
    await run_store.create_many([NewRun(handler="demo.echo", input={}) for _ in range(runs)])
    store = counting(lease_store, delay_s=0.02)
    started: list[ClaimedRun] = []
    slots = Slots(8)
    courier = finishing_courier(store, slots, started)
    assert courier.claim_max == 4  # each trip claims its half of the slots
    courier.start()
    try:
        await eventually(
            lambda: asyncio.sleep(0, len(started)), until=lambda n: n == runs, what="all started"
        )
    finally:
        await courier.close()
    assert len({run.id for run in started}) == runs
    assert store.most_in_flight == 2, f"claims in flight at most {store.most_in_flight}"
