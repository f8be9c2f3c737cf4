"""join_children, the outbox and its deliveries on the real Redis.

A child's end enters its slot's outbox in the same step as its terminal state; the
delivery records it in the parent's slot once and wakes a parked join; a parent's end
reaches its live children. Every delivery is idempotent: delivering twice writes
nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.errors import InvalidTransition, LeaseLost
from app.models import RunStatus
from app.models.read import PurgeRequest
from app.settings import Settings
from app.store.context import StoreContext
from app.store.family.children import ChildStore, JoinMode, JoinOutcome, OnParentEnd, SpawnLimits
from app.store.keys import QueueKeys
from app.store.leases.store import ClaimedRun, Lease, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.outbox.store import Outbox
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import eventually
from tests.support.snapshots import changes, snapshot

PARENTS = "default"
KIDS = "outbox-kids"
OWNER = "w-outbox"


@dataclass
class Family:
    runs: RunStore
    leases: LeaseStore
    children: ChildStore
    outbox: Outbox
    client: aioredis.Redis
    prefix: str

    def keys(self, queue: str = PARENTS) -> QueueKeys:
        return QueueKeys(self.prefix, queue)

    async def parent(self, **options: Any) -> ClaimedRun:
        await self.runs.create(NewRun(handler="demo.echo", input={}, **options))
        (run,) = (await self.leases.claim(PARENTS, OWNER, 1)).runs
        return run

    async def spawn(
        self, parent: ClaimedRun, ordinal: int, policy: OnParentEnd = OnParentEnd.CANCEL
    ) -> str:
        step = await self.children.record_spawn(
            parent.lease,
            ordinal=ordinal,
            child_queue=KIDS,
            on_parent_end=policy,
            limits=SpawnLimits(),
        )
        new = NewRun(
            handler="demo.echo",
            input={"n": ordinal},
            queue=KIDS,
            run_id=step.child_id,
            parent_id=parent.id,
            root_id=step.root_id,
            depth=step.depth,
        )
        await self.children.create_child(new)
        return step.child_id

    async def claim_kid(self) -> ClaimedRun:
        (run,) = (await self.leases.claim(KIDS, OWNER, 1)).runs
        return run

    async def end(self, run: ClaimedRun, status: RunStatus, output: str = "") -> None:
        outcome = Outcome(run.lease, status, output_json=output)
        await self.leases.finish_and_claim(run.queue, OWNER, [outcome], 0)

    async def join(self, lease: Lease, ids: list[str], mode: JoinMode, **kw: Any) -> Any:
        return await self.children.join(
            lease,
            ordinal=kw.get("ordinal", 1),
            mode=mode,
            child_ids=ids,
            timeout_ms=kw.get("timeout_ms"),
        )


@pytest.fixture
def fam(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis, settings: Settings
) -> Family:
    ctx = StoreContext.for_settings(redis_client, Scripts(), settings)
    return Family(
        run_store, lease_store, ChildStore(ctx), Outbox(ctx), redis_client, settings.prefix
    )


async def test_a_child_end_enters_its_own_slots_outbox_with_its_terminal_state(
    fam: Family,
) -> None:
    parent = await fam.parent()
    kid_id = await fam.spawn(parent, 1)
    kid = await fam.claim_kid()
    assert kid.id == kid_id
    await fam.end(kid, RunStatus.SUCCEEDED, '{"n":1}')
    entries = await fam.client.zrange(fam.keys(KIDS).outbox, 0, -1)
    assert entries == [f"ended {kid_id} {parent.id}"]  # the parent named: it outlives the record
    assert await fam.client.zcard(fam.keys().outbox) == 0  # the parent has not ended


async def test_a_parked_join_holds_no_lease_and_wakes_when_its_last_child_is_delivered(
    fam: Family,
) -> None:
    parent = await fam.parent()
    ids = [await fam.spawn(parent, 1), await fam.spawn(parent, 2)]
    parked = await fam.join(parent.lease, ids, JoinMode.ALL)
    assert parked.outcome == JoinOutcome.PARKED
    record = await fam.runs.get(parent.id)
    assert record.status == RunStatus.WAITING and record.owner_id is None
    assert record.waiting_for is not None and record.waiting_for["kind"] == "join"
    assert await fam.client.zscore(fam.keys().leases, parent.id) is None
    assert await fam.client.smembers(fam.keys().joining(parent.id)) == set(ids)

    for n in (1, 2):
        await fam.end(await fam.claim_kid(), RunStatus.SUCCEEDED, f'{{"n":{n}}}')
        assert await fam.outbox.sweep([KIDS]) == 1
        status = (await fam.runs.get(parent.id)).status
        assert status == (RunStatus.WAITING if n == 1 else RunStatus.QUEUED)
    events = [e.type for e in await fam.runs.read_events(parent.id)]
    assert events.count("child_ended") == 2
    assert await fam.client.zcard(fam.keys(KIDS).outbox) == 0

    (again,) = (
        await eventually(lambda: fam.leases.claim(PARENTS, OWNER, 1), until=lambda c: bool(c.runs))
    ).runs
    over = await fam.join(again.lease, ids, JoinMode.ALL)
    assert over.outcome == JoinOutcome.OVER
    assert [o[:40] for o in over.outcomes] == [
        '{"status":"succeeded","output":{"n":1},"',
        '{"status":"succeeded","output":{"n":2},"',
    ]


async def test_a_sweep_of_empty_outboxes_calls_no_script_and_still_finds_a_full_one(
    fam: Family,
) -> None:
    async def scripts_called() -> int:
        stats = await fam.client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = await scripts_called()
    assert await fam.outbox.sweep([PARENTS, KIDS, "idle-queue"]) == 0
    assert await scripts_called() == before  # three EXISTS in one round trip, no take_outbox
    parent = await fam.parent()
    ids = [await fam.spawn(parent, 1)]
    assert (await fam.join(parent.lease, ids, JoinMode.ALL)).outcome == JoinOutcome.PARKED
    await fam.end(await fam.claim_kid(), RunStatus.SUCCEEDED, '{"n":1}')
    assert await fam.outbox.sweep([PARENTS, "idle-queue", KIDS]) == 1
    assert (await fam.runs.get(parent.id)).status == RunStatus.QUEUED
    assert await fam.client.zcard(fam.keys(KIDS).outbox) == 0


async def test_a_delivery_twice_writes_nothing_the_second_time(fam: Family) -> None:
    parent = await fam.parent()
    kid_id = await fam.spawn(parent, 1)
    await fam.end(await fam.claim_kid(), RunStatus.FAILED)
    await fam.outbox.deliver(KIDS, f"ended {kid_id}")
    before = await snapshot(fam.client, fam.prefix)
    assert await fam.outbox.deliver(KIDS, f"ended {kid_id}") == set()
    assert not changes(before, await snapshot(fam.client, fam.prefix))


@pytest.mark.parametrize("mode", [JoinMode.SETTLED, JoinMode.ALL])
async def test_a_child_record_gone_before_its_delivery_still_ends_the_parents_join(
    fam: Family, mode: JoinMode
) -> None:
    parent = await fam.parent()
    ids = [await fam.spawn(parent, 1), await fam.spawn(parent, 2)]
    assert (await fam.join(parent.lease, ids, mode)).outcome == JoinOutcome.PARKED
    first, second = await fam.claim_kid(), await fam.claim_kid()
    await fam.end(first, RunStatus.SUCCEEDED, '{"n":1}')
    await fam.end(second, RunStatus.SUCCEEDED, '{"n":2}')
    # retention ran out while the delivery was stuck, or an operator DEL'd the keys
    kids = fam.keys(KIDS)
    await fam.client.delete(kids.run(second.id), kids.events(second.id))
    assert await fam.outbox.sweep([KIDS]) == 2
    assert await fam.client.zcard(kids.outbox) == 0
    assert (await fam.runs.get(parent.id)).status == RunStatus.QUEUED
    ended = [e.data for e in await fam.runs.read_events(parent.id) if e.type == "child_ended"]
    gone = [data for data in ended if data.get("reason") == "child_record_gone"]
    assert [(d["child_id"], d["status"]) for d in gone] == [(second.id, "failed")]

    (again,) = (
        await eventually(lambda: fam.leases.claim(PARENTS, OWNER, 1), until=lambda c: bool(c.runs))
    ).runs
    over = await fam.join(again.lease, ids, mode)
    assert over.outcome == JoinOutcome.OVER
    assert over.outcomes[0].startswith('{"status":"succeeded","output":{"n":1}')
    assert over.outcomes[1].startswith('{"status":"failed","output":null,')
    assert '"code":"child_record_gone"' in over.outcomes[1]


async def test_a_delivery_whose_parent_record_is_gone_ends_its_entry(fam: Family) -> None:
    parent = await fam.parent()
    await fam.spawn(parent, 1)
    await fam.end(await fam.claim_kid(), RunStatus.SUCCEEDED, '{"n":1}')
    await fam.client.delete(fam.keys().run(parent.id), fam.keys().events(parent.id))
    before = await snapshot(fam.client, fam.prefix)
    assert await fam.outbox.sweep([KIDS]) == 1
    assert await fam.client.zcard(fam.keys(KIDS).outbox) == 0  # not handed out again
    after = await snapshot(fam.client, fam.prefix)
    assert await fam.outbox.sweep([KIDS]) == 0
    # the same with the child's record gone too: nobody is left to tell
    other = await fam.parent()
    await fam.spawn(other, 1)
    kid = await fam.claim_kid()
    await fam.end(kid, RunStatus.SUCCEEDED)
    await fam.client.delete(fam.keys().run(other.id), fam.keys(KIDS).run(kid.id))
    assert await fam.outbox.sweep([KIDS]) == 1
    assert await fam.client.zcard(fam.keys(KIDS).outbox) == 0
    # the first delivery wrote only the entry's removal
    assert set(changes(before, after)) == {fam.keys(KIDS).outbox}


async def test_a_child_is_not_deleted_before_its_end_reaches_its_parent(fam: Family) -> None:
    # the soak's hang: a purge took a child inside a taken entry's hold, the delivery found
    # no record, and the parent's join waited for ever
    parent = await fam.parent()
    kid_id = await fam.spawn(parent, 1)
    await fam.end(await fam.claim_kid(), RunStatus.FAILED)
    before = await snapshot(fam.client, fam.prefix)
    with pytest.raises(InvalidTransition, match="has not reached its family"):
        await fam.runs.delete(kid_id)
    purged = await fam.runs.purge(PurgeRequest(queue=KIDS))
    assert purged.deleted == 0
    assert not changes(before, await snapshot(fam.client, fam.prefix))
    assert await fam.outbox.sweep([KIDS]) == 1
    assert await fam.runs.delete(kid_id) == RunStatus.FAILED


async def test_a_parent_is_not_deleted_before_its_end_reaches_its_children(fam: Family) -> None:
    parent = await fam.parent()
    await fam.spawn(parent, 1)
    await fam.end(parent, RunStatus.FAILED)
    with pytest.raises(InvalidTransition, match="has not reached its family"):
        await fam.runs.delete(parent.id)
    await fam.outbox.sweep([PARENTS])
    assert await fam.runs.delete(parent.id) == RunStatus.FAILED


async def test_any_wakes_on_the_first_success_and_all_on_the_first_failure(
    fam: Family,
) -> None:
    parent = await fam.parent()
    ids = [await fam.spawn(parent, n) for n in (1, 2, 3)]
    assert (await fam.join(parent.lease, ids, JoinMode.ALL)).outcome == JoinOutcome.PARKED
    await fam.end(await fam.claim_kid(), RunStatus.FAILED)
    await fam.outbox.sweep([KIDS])
    assert (await fam.runs.get(parent.id)).status == RunStatus.QUEUED  # all: one failure


async def test_a_join_of_a_stranger_or_by_a_stale_owner_writes_nothing(fam: Family) -> None:
    parent = await fam.parent()
    other = await fam.parent()
    mine = await fam.spawn(parent, 1)
    theirs = await fam.spawn(other, 1)
    before = await snapshot(fam.client, fam.prefix)
    refused = await fam.join(parent.lease, [mine, theirs], JoinMode.SETTLED)
    assert (refused.outcome, refused.stranger) == (JoinOutcome.STRANGER, theirs)
    stale = Lease(PARENTS, parent.id, OWNER, parent.fence + 1)
    with pytest.raises(LeaseLost):
        await fam.join(stale, [mine], JoinMode.SETTLED)
    assert not changes(before, await snapshot(fam.client, fam.prefix))


async def test_a_join_timeout_is_recorded_and_replays(fam: Family) -> None:
    parent = await fam.parent()
    ids = [await fam.spawn(parent, 1)]
    assert (await fam.join(parent.lease, ids, JoinMode.ALL, timeout_ms=0)).outcome == (
        JoinOutcome.TIMED_OUT
    )
    again = await fam.join(parent.lease, ids, JoinMode.ALL)
    assert again.outcome == JoinOutcome.TIMED_OUT


async def test_a_parent_end_cancels_its_live_children_but_not_a_detached_one(
    fam: Family,
) -> None:
    parent = await fam.parent()
    queued = await fam.spawn(parent, 1)
    running = await fam.spawn(parent, 2)
    kept = await fam.spawn(parent, 3, OnParentEnd.DETACH)
    held = await fam.claim_kid()
    assert held.id == queued  # FIFO: the first child is the one a worker holds
    held_id, queued_id = queued, running
    await fam.end(parent, RunStatus.SUCCEEDED, "{}")
    assert await fam.client.zrange(fam.keys().outbox, 0, -1) == [f"cascade {parent.id}"]
    await fam.outbox.sweep([PARENTS])
    assert (await fam.runs.get(held_id)).status == RunStatus.CANCELLING
    assert (await fam.runs.get(queued_id)).status == RunStatus.CANCELLED
    assert (await fam.runs.get(kept)).status == RunStatus.QUEUED
    cancelled = [e for e in await fam.runs.read_events(queued_id) if e.type == "cancelled"]
    assert cancelled[0].data["reason"] == "parent_ended"
    assert cancelled[0].data["parent_id"] == parent.id
    # delivered again (a crash before its removal): nothing changes
    before = await snapshot(fam.client, fam.prefix)
    await fam.outbox.deliver(PARENTS, f"cascade {parent.id}")
    assert not changes(before, await snapshot(fam.client, fam.prefix))


async def test_a_parent_record_gone_before_its_cascade_still_ends_its_children(
    fam: Family,
) -> None:
    parent = await fam.parent()
    live = await fam.spawn(parent, 1)
    kept = await fam.spawn(parent, 2, OnParentEnd.DETACH)
    await fam.end(parent, RunStatus.SUCCEEDED, "{}")
    # an operator removes the parent's record by hand before the sweep
    await fam.client.delete(fam.keys().run(parent.id), fam.keys().events(parent.id))
    # the cascade, then the cancelled child's own end, to a parent that is gone: both end
    assert await fam.outbox.sweep([PARENTS]) == 2
    assert await fam.client.zcard(fam.keys().outbox) == 0
    assert await fam.client.zcard(fam.keys(KIDS).outbox) == 0
    assert (await fam.runs.get(live)).status == RunStatus.CANCELLED
    assert (await fam.runs.get(kept)).status == RunStatus.QUEUED
    cancelled = [e for e in await fam.runs.read_events(live) if e.type == "cancelled"]
    assert cancelled[0].data == {**cancelled[0].data, "reason": "parent_ended"}


async def test_a_cancel_reaches_detached_children_and_tombstones_an_uncreated_one(
    fam: Family,
) -> None:
    parent = await fam.parent()
    kept = await fam.spawn(parent, 1, OnParentEnd.DETACH)
    step = await fam.children.record_spawn(
        parent.lease,
        ordinal=2,
        child_queue=KIDS,
        on_parent_end=OnParentEnd.CANCEL,
        limits=SpawnLimits(),
    )  # the worker died before the create
    assert await fam.runs.cancel(parent.id) == RunStatus.CANCELLING
    await fam.end(parent, RunStatus.CANCELLED)
    await fam.outbox.sweep([PARENTS])
    assert (await fam.runs.get(kept)).status == RunStatus.CANCELLED
    assert await fam.client.get(fam.keys(KIDS).unborn(step.child_id)) == parent.id


async def test_cancelling_a_parked_parent_cascades_at_once(fam: Family) -> None:
    parent = await fam.parent()
    ids = [await fam.spawn(parent, n) for n in (1, 2)]
    assert (await fam.join(parent.lease, ids, JoinMode.ALL)).outcome == JoinOutcome.PARKED
    assert await fam.runs.cancel(parent.id) == RunStatus.CANCELLED
    for kid in ids:  # no sweep ran: the cancel delivered it
        assert (await fam.runs.get(kid)).status == RunStatus.CANCELLED
    assert await fam.client.zcard(fam.keys().outbox) == 0
