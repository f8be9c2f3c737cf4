"""The courier against a real Redis whose answers get lost on the way back.

A round trip can fail *after* Redis ran it: the connection drops while the
reply is in flight. For a claim that means runs leased to this worker that it
never heard of. The courier sends the claim again with the same token, and
every run it took must start here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.exceptions import ConnectionError as RedisConnectionError

from app.executor.courier import Courier
from app.executor.slots import Slots
from app.models import RunStatus
from app.store.leases import Claim, ClaimedRun, LeaseStore, Outcome
from app.store.runs import NewRun, RunStore
from app.store.scripts import ScriptCode
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
    ) -> tuple[list[ScriptCode], Claim]:
        """Run the round trip; while losses remain, drop a reply that claimed runs."""
        answer = await super().finish_and_claim(queue, owner, outcomes, count, token)
        if self.losses and answer[1].runs:
            self.losses -= 1
            raise RedisConnectionError("connection closed while the reply was in flight")
        return answer


async def test_runs_claimed_by_a_round_trip_whose_reply_was_lost_still_start_here_once(
    run_store: RunStore, lease_store: LeaseStore
) -> None:
    store = LosingReplies(
        lease_store.client,
        scripts=lease_store.scripts,
        prefix=lease_store.prefix,
        lease_ttl_ms=lease_store.lease_ttl_ms,
        retention=lease_store.retention,
        events_maxlen=lease_store.events_maxlen,
    )
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
