"""spawn_child and a child's create on the real Redis: one child per spawn step, for ever.

The executor's ``ctx.spawn`` (app/executor/children.py) records the step in the
parent's slot, then creates the child in the child's slot. These hold what it relies
on: a replay of the step (a takeover, a reply lost) names the same child, a second
create of that id creates nothing, every refusal writes nothing, and the family keys
expire with the parent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.errors import InvalidTransition, LeaseLost
from app.models import RunStatus
from app.settings import Settings
from app.store.context import StoreContext
from app.store.family.children import ChildStore, OnParentEnd, SpawnAnswer, SpawnLimits, SpawnStep
from app.store.keys import QueueKeys
from app.store.leases.store import ClaimedRun, Lease, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.snapshots import changes, snapshot

QUEUE = "default"
OTHER = "children-elsewhere"
OWNER = "w-children"
LIMITS = SpawnLimits(max_children=3, max_depth=2)


@pytest.fixture
def children(redis_client: aioredis.Redis, settings: Settings) -> ChildStore:
    return ChildStore(StoreContext.for_settings(redis_client, Scripts(), settings))


@dataclass
class World:
    """The stores of one test and a way to show that a refusal wrote nothing."""

    runs: RunStore
    leases: LeaseStore
    children: ChildStore
    client: aioredis.Redis
    prefix: str

    @property
    def parent_keys(self) -> QueueKeys:
        return QueueKeys(self.prefix, QUEUE)

    async def held(self, **options: Any) -> ClaimedRun:
        """A run created with ``options`` and claimed by OWNER: the parent."""
        await self.runs.create(NewRun(handler="demo.echo", input={}, **options))
        (run,) = (await self.leases.claim(QUEUE, OWNER, 1)).runs
        return run

    async def unchanged_by(self, action: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``action``; assert nothing under the prefix changed; return its result."""
        before = await snapshot(self.client, self.prefix)
        result = await action()
        assert not changes(before, await snapshot(self.client, self.prefix))
        return result


@pytest.fixture
def w(
    run_store: RunStore,
    lease_store: LeaseStore,
    children: ChildStore,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> World:
    return World(run_store, lease_store, children, redis_client, settings.prefix)


async def spawn(
    children: ChildStore,
    lease: Lease,
    ordinal: int,
    *,
    queue: str = OTHER,
    policy: OnParentEnd = OnParentEnd.CANCEL,
) -> SpawnStep:
    return await children.record_spawn(
        lease, ordinal=ordinal, child_queue=queue, on_parent_end=policy, limits=LIMITS
    )


def child_of(step: SpawnStep, parent: ClaimedRun, queue: str = OTHER) -> NewRun:
    return NewRun(
        handler="demo.echo",
        input={"n": 1},
        queue=queue,
        run_id=step.child_id,
        parent_id=parent.id,
        root_id=step.root_id,
        depth=step.depth,
    )


async def runs_of_parent(w: World, queue: str, parent_id: str) -> int:
    """How many run records on ``queue`` name ``parent_id``: what 'no second child' counts."""
    keys = QueueKeys(w.prefix, queue)
    count = 0
    for run_id in await w.client.zrange(keys.runs, 0, -1):
        if await w.client.hget(keys.run(run_id), "parent_id") == parent_id:
            count += 1
    return count


async def test_a_top_level_run_is_its_own_root_at_depth_zero(w: World) -> None:
    created = await w.runs.create(NewRun(handler="demo.echo", input={}))
    stored = await w.runs.get(created.run.id)
    assert (stored.parent_id, stored.root_id, stored.depth) == (None, created.run.id, 0)
    assert (created.run.parent_id, created.run.root_id) == (None, created.run.id)


async def test_a_spawn_step_names_one_child_for_ever_and_a_second_create_makes_none(
    w: World,
) -> None:
    parent = await w.held()
    first = await spawn(w.children, parent.lease, 1)
    assert first.answer == SpawnAnswer.NEW
    assert first.child_id.startswith(f"{OTHER}.")
    assert (first.root_id, first.depth) == (parent.id, 1)
    index = w.parent_keys.children(parent.id)
    # in the parent's index before the child exists: a cascade never misses it
    assert await w.client.zrange(index, 0, -1) == [first.child_id]

    assert await w.children.create_child(child_of(first, parent))  # created
    stored = await w.runs.get(first.child_id)
    assert (stored.parent_id, stored.root_id, stored.depth) == (parent.id, parent.id, 1)
    assert stored.queue == OTHER and stored.status == RunStatus.QUEUED

    # a takeover (or a reply lost) meets the step again: the same child, created once
    again = await spawn(w.children, parent.lease, 1)
    assert (again.answer, again.child_id) == (SpawnAnswer.REPLAYED, first.child_id)
    assert not await w.children.create_child(child_of(again, parent))  # existed
    assert await runs_of_parent(w, OTHER, parent.id) == 1
    assert await w.client.zcard(index) == 1

    second = await spawn(w.children, parent.lease, 2, queue=QUEUE)
    assert second.answer == SpawnAnswer.NEW and second.child_id != first.child_id


async def test_a_child_inherits_the_parents_concurrency_key_and_trace(w: World) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parent = await w.held(concurrency_key="tenant-7", traceparent=traceparent)
    step = await spawn(w.children, parent.lease, 1)
    assert (step.concurrency_key, step.traceparent) == ("tenant-7", traceparent)


async def test_a_grandchild_keeps_the_root_and_a_spawn_past_the_depth_writes_nothing(
    w: World,
) -> None:
    parent = await w.held()
    step = await spawn(w.children, parent.lease, 1, queue=QUEUE)
    await w.children.create_child(child_of(step, parent, QUEUE))
    (child,) = (await w.leases.claim(QUEUE, OWNER, 1)).runs
    grand = await spawn(w.children, child.lease, 1, queue=QUEUE)
    assert (grand.answer, grand.root_id, grand.depth) == (SpawnAnswer.NEW, parent.id, 2)
    await w.children.create_child(child_of(grand, child, QUEUE))
    (grandchild,) = (await w.leases.claim(QUEUE, OWNER, 1)).runs
    assert (await w.runs.get(grandchild.id)).root_id == parent.id

    too_deep = await w.unchanged_by(lambda: spawn(w.children, grandchild.lease, 1, queue=QUEUE))
    assert (too_deep.answer, too_deep.depth) == (SpawnAnswer.TOO_DEEP, 3)


async def test_a_spawn_past_max_children_writes_nothing(w: World) -> None:
    parent = await w.held()
    for ordinal in (1, 2, 3):
        assert (await spawn(w.children, parent.lease, ordinal)).answer == SpawnAnswer.NEW
    full = await w.unchanged_by(lambda: spawn(w.children, parent.lease, 4))
    assert (full.answer, full.count) == (SpawnAnswer.FULL, 3)
    # a recorded step still replays at the bound
    assert (await spawn(w.children, parent.lease, 2)).answer == SpawnAnswer.REPLAYED


async def test_a_stale_owner_spawns_nothing(w: World) -> None:
    parent = await w.held()
    stale = Lease(QUEUE, parent.id, OWNER, parent.fence - 1)
    stranger = Lease(QUEUE, parent.id, "w-other", parent.fence)

    async def both() -> None:
        for lease in (stale, stranger):
            with pytest.raises(LeaseLost):
                await spawn(w.children, lease, 1)

    await w.unchanged_by(both)


async def test_a_parent_being_cancelled_spawns_nothing_new_but_replays_its_steps(
    w: World,
) -> None:
    parent = await w.held()
    first = await spawn(w.children, parent.lease, 1)
    assert await w.runs.cancel(parent.id) == RunStatus.CANCELLING
    refused = await w.unchanged_by(lambda: spawn(w.children, parent.lease, 2))
    assert refused.answer == SpawnAnswer.CANCELLING
    assert (await spawn(w.children, parent.lease, 1)).child_id == first.child_id


async def test_a_detached_child_is_marked_in_its_parents_family(w: World) -> None:
    parent = await w.held()
    kept = await spawn(w.children, parent.lease, 1, policy=OnParentEnd.DETACH)
    plain = await spawn(w.children, parent.lease, 2)
    family = await w.client.hgetall(w.parent_keys.family(parent.id))
    assert family == {
        "spawn:1": kept.child_id,
        "spawn:2": plain.child_id,
        f"detach:{kept.child_id}": "1",
    }


async def test_a_child_with_a_tombstone_is_never_created(w: World) -> None:
    """A stale parent worker's create after the parent's end cancelled the child: refused."""
    parent = await w.held()
    step = await spawn(w.children, parent.lease, 1)
    await w.client.set(QueueKeys(w.prefix, OTHER).unborn(step.child_id), "1")

    async def create() -> None:
        with pytest.raises(InvalidTransition):
            await w.children.create_child(child_of(step, parent))

    await w.unchanged_by(create)


async def test_the_family_keys_expire_with_the_parent(w: World) -> None:
    parent = await w.held()
    await spawn(w.children, parent.lease, 1)
    keys = w.parent_keys
    assert await w.client.pttl(keys.children(parent.id)) == -1
    assert await w.runs.cancel(parent.id) == RunStatus.CANCELLING
    ended = Outcome(parent.lease, RunStatus.CANCELLED)
    await w.leases.finish_and_claim(QUEUE, OWNER, [ended], 0)
    record_ttl = await w.client.pttl(keys.run(parent.id))
    assert record_ttl > 0
    for key in (keys.children(parent.id), keys.family(parent.id)):
        assert 0 < await w.client.pttl(key) <= record_ttl + 50
