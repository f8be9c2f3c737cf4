"""The courier against a real Redis whose answers get lost on the way back.

A round trip can fail *after* Redis ran it: the connection drops while the
reply is in flight. For a claim that means runs leased to this worker that it
never heard of. The courier sends the claim again with the same token, and
every run it took must start here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from app.executor.courier import Courier
from app.executor.slots import Slots
from app.models import RunStatus
from app.settings import Settings
from app.store.codec import dumps
from app.store.leases.store import Claim, ClaimedRun, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.memory import SmallRedis
from tests.support.polling import eventually

OWNER = "w-courier"


class LosingReplies(LeaseStore):
    """A store whose first ``losses`` claiming round trips run in Redis, then fail."""

    losses = 0

    async def finish_and_claim(
        self,
        queue: str,
        owner: str,
        outcomes: Sequence[Outcome],
        count: int,
        token: str | None = None,
        *,
        handoff_ms: int = 0,
    ) -> tuple[list[LeaseAnswer], Claim]:
        """Run the round trip; while losses remain, drop a reply that claimed runs."""
        answer = await super().finish_and_claim(
            queue, owner, outcomes, count, token, handoff_ms=handoff_ms
        )
        if self.losses and answer[1].runs:
            self.losses -= 1
            raise RedisConnectionError("connection closed while the reply was in flight")
        return answer


def store_like(cls: type[LeaseStore], lease_store: LeaseStore) -> LeaseStore:
    return cls(lease_store.ctx)


async def test_runs_claimed_by_a_round_trip_whose_reply_was_lost_still_start_here_once(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    store = store_like(LosingReplies, lease_store)
    assert isinstance(store, LosingReplies)
    store.losses = 2
    ids = [(await run_store.create(NewRun(handler="demo.echo", input={}))).run.id for _ in range(6)]
    started: list[ClaimedRun] = []
    slots = Slots(4)
    courier = Courier(
        queue="default",
        store=store,
        owner_id=OWNER,
        slots=slots,
        start_run=lambda run, _sent_at: started.append(run),
        batch_max=4,
        idle_wake_s=0.2,
    )
    courier.start()
    try:
        await eventually(
            lambda: asyncio.sleep(0, len(started)), until=lambda n: n >= 4, what="4 runs started"
        )
        await asyncio.sleep(0.3)  # room for a wrong extra start to show up
    finally:
        await courier.close()
    assert store.losses == 0, "both replies were lost"
    assert len(started) == len({run.id for run in started}) == 4  # each once, none beyond slots
    assert slots.free == 0
    runs = [await run_store.get(run_id) for run_id in ids]
    held = [run for run in runs if run.status == RunStatus.RUNNING]
    assert sorted(run.id for run in held) == sorted(run.id for run in started)
    assert all(run.owner_id == OWNER for run in held)
    assert sum(run.status == RunStatus.QUEUED for run in runs) == 2  # nothing leased to a ghost
    for run in held:
        kinds = [event.type for event in await run_store.read_events(run.id)]
        assert kinds == ["created", "claimed"]


class RefusingFinishes(LeaseStore):
    """A store whose first ``refusals`` round trips with outcomes are refused whole by Redis."""

    refusals = 0
    error: Exception = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")

    async def finish_and_claim(
        self,
        queue: str,
        owner: str,
        outcomes: Sequence[Outcome],
        count: int,
        token: str | None = None,
        *,
        handoff_ms: int = 0,
    ) -> tuple[list[LeaseAnswer], Claim]:
        """Refuse before sending anything while refusals remain, as Redis refuses a script."""
        if outcomes and self.refusals:
            self.refusals -= 1
            raise self.error
        return await super().finish_and_claim(
            queue, owner, outcomes, count, token, handoff_ms=handoff_ms
        )


def courier_on(store: LeaseStore, started: list[ClaimedRun], slots: Slots | None = None) -> Courier:
    return Courier(
        queue="default",
        store=store,
        owner_id=OWNER,
        slots=slots or Slots(1),
        start_run=lambda run, _sent_at: started.append(run),
        batch_max=1,
        idle_wake_s=0.2,
    )


@pytest.mark.parametrize(
    "error",
    [
        OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        ReadOnlyError("You can't write against a read only replica."),
        RedisConnectionError("Connection reset by peer"),
    ],
    ids=["oom", "readonly", "connection"],
)
async def test_a_terminal_write_refused_by_redis_is_retried_and_lands_with_the_handlers_output(
    run_store: RunStore, lease_store: LeaseStore, error: Exception
) -> None:
    store = store_like(RefusingFinishes, lease_store)
    assert isinstance(store, RefusingFinishes)
    store.refusals, store.error = 2, error
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={"n": 1}))).run.id
    started: list[ClaimedRun] = []
    courier = courier_on(store, started)
    courier.start()
    try:
        await eventually(lambda: asyncio.sleep(0, started), until=bool, what="the run claimed")
        output = dumps({"answer": 42, "from": "the handler"})
        code = await asyncio.wait_for(
            courier.finish(Outcome(started[0].lease, RunStatus.SUCCEEDED, output_json=output)),
            timeout=30,
        )
    finally:
        await courier.close()
    assert store.refusals == 0, "Redis refused the terminal write twice first"
    assert code == LeaseAnswer.OK
    run = await run_store.get(run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"answer": 42, "from": "the handler"}
    kinds = [event.type for event in await run_store.read_events(run_id)]
    assert kinds == ["created", "claimed", "succeeded"]


async def test_at_maxmemory_outcomes_land_claims_pause_and_resume_once_memory_frees(
    small_redis: SmallRedis, prefix: str, scripts: Scripts, tmp_path: Path
) -> None:
    settings = Settings(redis_url=small_redis.url, prefix=prefix, state_dir=tmp_path / "state")
    client = async_client(small_redis.url)
    try:
        run_store = RunStore.for_settings(client, scripts, settings)
        store = LeaseStore.for_settings(client, scripts, settings)
        ids = [
            (await run_store.create(NewRun(handler="demo.echo", input={"n": n}))).run.id
            for n in range(2)
        ]
        started: list[ClaimedRun] = []
        slots = Slots(1)
        courier = courier_on(store, started, slots)
        courier.start()
        try:
            await eventually(lambda: asyncio.sleep(0, started), until=bool, what="a claim")
            small_redis.set_max(small_redis.used_bytes() // 2)  # Redis is now past maxmemory
            slots.give_back(1)  # as a worker does when the handler returns, before the write
            courier.kick()
            output = dumps({"blob": "y" * 50_000})  # an outcome that grows memory
            code = await asyncio.wait_for(
                courier.finish(Outcome(started[0].lease, RunStatus.SUCCEEDED, output_json=output)),
                timeout=30,
            )
            assert code == LeaseAnswer.OK
            assert (await run_store.get(ids[0])).output == {"blob": "y" * 50_000}
            await asyncio.sleep(0.5)  # room for a wrong claim to show up
            assert [run.id for run in started] == [ids[0]], "claimed at maxmemory"
            assert small_redis.oom_refusals() >= 1, "Redis refused the claim"
            assert (await run_store.get(ids[1])).status == RunStatus.QUEUED
            small_redis.set_max(0)  # memory frees: claims resume on their own
            await eventually(
                lambda: asyncio.sleep(0, len(started)), until=lambda n: n == 2, what="claim"
            )
        finally:
            await courier.close()
        assert started[1].id == ids[1]
    finally:
        await client.aclose()


class CreatedWhileClaiming(LeaseStore):
    """A store where a run is created, and its wake heard, while a claim's reply is on its way.

    The claim runs in Redis on an empty queue; before its reply reaches the courier a
    producer creates a run and the worker's listener hands the courier that run's wake,
    the order a busy machine gives them (issue 17: a fan-out's children spawned while the
    children's worker was claiming waited ~5 s, the safety-net timer, to start).
    """

    run_store: RunStore | None = None
    courier: Courier | None = None
    created: ClassVar[list[str]] = []
    creating = False  # two trips may be in flight: only the first empty answer creates

    async def finish_and_claim(self, *args: Any, **kwargs: Any) -> tuple[list[LeaseAnswer], Claim]:
        """Run the round trip; after the first (the courier's start: a claim on an empty
        queue), create a run and wake the courier before the reply is handed back."""
        answer = await super().finish_and_claim(*args, **kwargs)
        if not answer[1].runs and not self.creating:
            assert self.run_store is not None and self.courier is not None
            self.creating = True
            self.created.append(
                (await self.run_store.create(NewRun(handler="demo.echo", input={}))).run.id
            )
            self.courier.notify_ready()  # the listener got the create's wake meanwhile
        return answer


async def test_a_run_created_while_a_claim_is_in_flight_starts_without_waiting_for_the_timer(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    store = store_like(CreatedWhileClaiming, lease_store)
    assert isinstance(store, CreatedWhileClaiming)
    started: list[ClaimedRun] = []
    courier = Courier(
        queue="default",
        store=store,
        owner_id=OWNER,
        slots=Slots(4),
        start_run=lambda run, _sent_at: started.append(run),
        batch_max=4,
        idle_wake_s=60.0,  # the safety net would start it only after a minute
    )
    store.run_store, store.courier = run_store, courier
    store.created.clear()
    courier.start()
    try:
        await eventually(
            lambda: asyncio.sleep(0, [run.id for run in started]),
            until=lambda ids: ids == store.created and ids != [],
            timeout_s=5.0,
            what="the run created during the claim's flight to start",
        )
    finally:
        await courier.close()
