"""Runs that start runs, with real workers: spawn exactly once across a kill -9.

What each attempt of a parent really did is counted through a Redis list the test
owns (tests/support/family_handlers.py); how many children exist is counted from
the run records by ``parent_id``, not from Leasehold's own index.
"""

from __future__ import annotations

import signal
from typing import Any

import redis.asyncio as aioredis

from app.models import RunStatus
from app.models.read import QueueLimits
from app.settings import Settings
from app.stack.processes import Child
from app.store.flow.store import FlowStore
from app.store.keys import QueueKeys
from app.store.leases.workers import list_workers
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import WaitStore
from tests.support.family_handlers import trail_key
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

QUEUE = "default"


async def submit(run_store: RunStore, handler: str, **options: Any) -> str:
    input = options.pop("input", {})
    return (await run_store.create(NewRun(handler=handler, input=input, **options))).run.id


async def trail(client: aioredis.Redis, prefix: str, run_id: str) -> list[str]:
    return list(await client.lrange(trail_key(prefix, run_id), 0, -1))


async def runs_where(
    client: aioredis.Redis, prefix: str, field: str, value: str, queue: str = QUEUE
) -> list[str]:
    """Every run record of the queue whose ``field`` is ``value`` (parent_id, root_id)."""
    keys = QueueKeys(prefix, queue)
    ids = await client.zrange(keys.runs, 0, -1)
    pipe = client.pipeline(transaction=False)
    for run_id in ids:
        pipe.hget(keys.run(run_id), field)
    found = await pipe.execute()
    return [run_id for run_id, got in zip(ids, found, strict=True) if got == value]


async def test_a_parent_killed_after_spawn_is_taken_over_and_gets_the_same_child(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    first = processes.worker("--concurrency", "4")
    parent = await submit(
        run_store,
        "test.fan_out",
        # detached: the children may still be queued when the parent succeeds
        input={"children": 2, "hang_after_spawn": True, "on_parent_end": "detach"},
        max_attempts=3,
        on_lease_expired="retry",
    )
    spawned = await eventually(
        lambda: trail(redis_client, settings.prefix, parent),
        until=lambda lines: len(lines) == 1,
        what="the first attempt's spawns to return",
    )
    children = spawned[0].split(":")[2].split(",")  # "<fence>:spawned:<ids>:<owner>"
    # spawn returned; no checkpoint was taken: kill the worker before it can record more
    first.signal(signal.SIGKILL)
    assert first.wait(timeout_s=10) is not None
    processes.worker("--concurrency", "4")

    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output == {"children": children}  # the takeover got the same two back
    lines = await trail(redis_client, settings.prefix, parent)
    assert [line.split(":")[1] for line in lines] == ["spawned", "spawned"]
    assert lines[1].split(":")[2] == ",".join(children)
    assert int(lines[1].split(":")[0]) > int(lines[0].split(":")[0])  # a later fence
    assert sorted(await runs_where(redis_client, settings.prefix, "parent_id", parent)) == sorted(
        children
    )
    for child_id in children:
        child = await wait_status(run_store, child_id, RunStatus.SUCCEEDED)
        assert (child.parent_id, child.root_id, child.depth) == (parent, parent, 1)


async def test_a_fork_bomb_stops_at_the_depth_limit_with_a_typed_refusal(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    processes.worker("--concurrency", "8", LEASEHOLD_MAX_RUN_DEPTH="2")
    root = await submit(run_store, "test.fork_bomb")

    async def tree() -> list[str]:
        ids = await runs_where(redis_client, settings.prefix, "root_id", root)
        return [run_id for run_id in ids if run_id != root]

    # 1 root, 2 children, 4 grandchildren; each grandchild's spawn (depth 3) is refused
    await eventually(tree, until=lambda ids: len(ids) == 6, what="the tree of depth 2")
    for run_id in [root, *await tree()]:
        done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
        assert done.status == RunStatus.SUCCEEDED, done.error
        if done.depth == 2:
            assert done.output == {"refused": {"depth": 3, "limit": 2, "root_id": root}}
    assert len(await tree()) == 6  # nothing below the limit was created


HOSTILE_SPAWNS = [
    ({"handler": "nobody.declared"}, "handler"),
    ({"queue": "never-declared"}, "queue"),
    ({"input": {"message": "x" * 2_000_000}}, "size_bytes"),
    ({"input": {"message": 1}}, "handler"),  # demo.echo's model refuses a number
    ({"options": {"on_parent_end": "explode"}}, "on_parent_end"),
    ({"options": {"max_attempts": 0}}, "max_attempts"),
    ({"options": {"concurrency_key": "a|b"}}, "concurrency_key"),
    ({"options": {"metadata": ["not", "an", "object"]}}, "metadata"),
    ({"options": {"metadata": {"blob": "x" * 20_000}}}, "LEASEHOLD_MAX_METADATA_BYTES"),
]


async def test_a_spawn_the_api_would_refuse_fails_typed_and_creates_nothing(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    processes.worker("--concurrency", "8")
    parents = {}
    for spec, detail in HOSTILE_SPAWNS:
        parents[await submit(run_store, "test.spawn_one", input=spec)] = detail
    for parent, detail in parents.items():
        done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
        assert done.status == RunStatus.FAILED, (parent, done.output)
        assert done.error is not None and done.error.code == "spawn_refused", done.error
        # a refused option names the option, and the bound it passed (metadata: 16 KiB)
        assert detail in done.error.details or detail in str(done.error.details), done.error
        assert await runs_where(redis_client, settings.prefix, "parent_id", parent) == []


KIDS = "kids"


def flow(settings: Settings, client: aioredis.Redis) -> FlowStore:
    return FlowStore(
        client, scripts=Scripts(), prefix=settings.prefix, events_maxlen=settings.events_maxlen
    )


async def statuses(run_store: RunStore, ids: list[str]) -> list[RunStatus]:
    return [(await run_store.get(run_id)).status for run_id in ids]


async def spawned_ids(client: aioredis.Redis, prefix: str, parent: str) -> list[str]:
    lines = await eventually(
        lambda: trail(client, prefix, parent), until=bool, what="the parent's spawns"
    )
    return lines[0].split(":")[2].split(",")


async def test_a_joining_parent_holds_no_lease_and_no_slot_and_resumes_with_the_outputs(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    # one run of the key at a time: the children (which inherit the key) can only start
    # once the parent gave its slot back, and each gives it back while it waits
    await flow(settings, redis_client).set_limits(QUEUE, QueueLimits(keys={"tenant-1": 1}))
    processes.worker("--concurrency", "4")
    parent = await submit(
        run_store,
        "test.fan_in",
        input={"children": 2, "handler": "test.await_signal", "child_input": {"name": "go"}},
        concurrency_key="tenant-1",
    )
    kids = await spawned_ids(redis_client, settings.prefix, parent)
    await eventually(
        lambda: statuses(run_store, [parent, *kids]),
        until=lambda got: got == [RunStatus.WAITING] * 3,
        what="the parent parked in its join and both children parked on their signal",
    )
    keys = QueueKeys(settings.prefix, QUEUE)
    parked = await run_store.get(parent)
    assert parked.owner_id is None
    assert parked.waiting_for is not None and parked.waiting_for["kind"] == "join"
    assert await redis_client.zscore(keys.leases, parent) is None
    assert await redis_client.hget(keys.run(parent), "held") is None
    assert await redis_client.hget(keys.slots, "k:tenant-1") is None  # nobody holds the key
    assert (await run_store.get(kids[0])).concurrency_key == "tenant-1"  # inherited

    waits = WaitStore.for_settings(redis_client, Scripts(), settings)
    for n, kid in enumerate(kids):
        await waits.signal(kid, "go", f'{{"n":{n}}}', max_pending=4)
    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output is not None
    assert [out["payload"] for out in done.output["joined"]] == [{"n": 0}, {"n": 1}]
    events = await run_store.read_events(parent)
    assert [e.type for e in events].count("child_ended") == 2
    waits_seen = [e for e in events if e.type == "wait"]
    assert [w.data["kind"] for w in waits_seen] == ["join"]


async def family_workers(
    processes: Processes, client: aioredis.Redis, prefix: str, kids_concurrency: int
) -> Child:
    """A worker of the kids' queue (returned) and one of the parents', once both serve."""
    kid_worker = processes.worker("--queues", KIDS, "--concurrency", str(kids_concurrency))
    processes.worker("--concurrency", "2")
    await eventually(
        lambda: client.sismember(f"{prefix}:queues", KIDS),
        until=bool,
        what="the kids' worker to declare its queue",
    )
    return kid_worker


async def running_family(
    processes: Processes,
    run_store: RunStore,
    client: aioredis.Redis,
    prefix: str,
    *,
    children: int,
    mode: str = "all",
) -> tuple[Child, str, list[str]]:
    """A parent parked in its join, its ``children`` sleeping on another queue's worker.

    Returns that worker (to kill or pause), the parent and the children, once all run.
    """
    kid_worker = await family_workers(processes, client, prefix, children)
    sleepy = {"handler": "demo.sleep", "child_input": {"seconds": 120}, "queue": KIDS}
    parent = await submit(
        run_store, "test.fan_in", input={"children": children, "mode": mode, **sleepy}
    )
    kids = await spawned_ids(client, prefix, parent)
    await eventually(
        lambda: statuses(run_store, [parent, *kids]),
        until=lambda got: got == [RunStatus.WAITING] + [RunStatus.RUNNING] * children,
        what="every child running, the parent parked",
    )
    return kid_worker, parent, kids


async def test_a_killed_childs_worker_orphans_it_and_the_parked_parent_resumes_with_that(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    kid_worker, parent, kids = await running_family(
        processes, run_store, redis_client, settings.prefix, children=2, mode="settled"
    )
    kid_worker.signal(signal.SIGKILL)
    assert kid_worker.wait(timeout_s=10) is not None

    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output is not None
    joined = done.output["joined"]
    assert [o["child_id"] for o in joined] == kids
    assert [o["status"] for o in joined] == ["orphaned", "orphaned"]
    assert all(o["error"]["code"] for o in joined)  # the orphan's own typed error


async def test_cancelling_a_parent_cancels_its_five_live_children_once_even_on_a_paused_worker(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    kid_worker, parent, kids = await running_family(
        processes, run_store, redis_client, settings.prefix, children=5
    )
    kid_worker.signal(signal.SIGSTOP)
    assert await run_store.cancel(parent) == RunStatus.CANCELLED
    # the paused worker cannot stop them: their leases run out and a reconciler ends them
    await eventually(
        lambda: statuses(run_store, kids),
        until=lambda got: got == [RunStatus.CANCELLED] * 5,
        what="all five children cancelled",
    )
    before = {kid: await run_store.read_events(kid) for kid in kids}
    kid_worker.signal(signal.SIGCONT)
    # the woken worker learns its leases are gone (renewal answers LOST) and drops them
    await eventually(
        lambda: list_workers(redis_client, settings.prefix, settings.lease_ttl_ms),
        until=lambda infos: any(
            KIDS in info.queues and info.running == 0 and info.alive for info in infos
        ),
        what="the resumed worker to hold nothing",
    )
    terminal = {"succeeded", "failed", "cancelled", "orphaned", "expired"}
    for run_id in [parent, *kids]:
        events = await run_store.read_events(run_id)
        assert [e.type for e in events if e.type in terminal] == ["cancelled"], run_id
        if run_id != parent:
            assert events == before[run_id], f"{run_id}: written after its cancellation"
            cancel = next(e for e in events if e.type == "cancel_requested")
            assert cancel.data["reason"] == "parent_cancelled"
            assert cancel.data["parent_id"] == parent


async def test_hostile_joins_fail_typed_and_a_timeout_is_join_timeout(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    processes.worker("--concurrency", "8")
    stranger = await submit(run_store, "demo.echo")
    cases = {
        "no children": ({"children": 0, "join_ids": []}, "invalid_wait"),
        "a stranger": ({"children": 1, "join_ids": [stranger]}, "invalid_wait"),
        "not an id": ({"children": 1, "join_ids": ["../../etc"]}, "invalid_wait"),
        "a bad mode": ({"children": 1, "mode": "most"}, "invalid_wait"),
        "an endless timeout": ({"children": 1, "timeout_s": 1e300}, "invalid_wait"),
        "a timeout": (
            {
                "children": 1,
                "handler": "demo.sleep",
                "child_input": {"seconds": 60},
                "timeout_s": 0.5,
            },
            "join_timeout",
        ),
    }
    parents = {
        name: await submit(run_store, "test.fan_in", input=spec)
        for name, (spec, _) in cases.items()
    }
    for name, (_, code) in cases.items():
        done = await wait_status(run_store, parents[name], RunStatus.SUCCEEDED, RunStatus.FAILED)
        assert done.status == RunStatus.FAILED, name
        assert done.error is not None and done.error.code == code, (name, done.error)
    timed_out = await run_store.get(parents["a timeout"])
    (kid,) = await runs_where(redis_client, settings.prefix, "parent_id", timed_out.id)
    # the parent failed: its live child got the default policy, cancel
    assert (await wait_status(run_store, kid, RunStatus.CANCELLED)).status == RunStatus.CANCELLED


async def test_children_spawned_while_their_worker_claims_start_at_once_and_the_parent_too(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    # the kids' worker is up and claiming while the parent spawns: each child's create
    # wakes it while its previous claim may be in flight, the order that lost a wake
    # (that child then waited for the 5 s safety-net timer to start, its parent with it)
    processes.worker("--queues", KIDS, "--concurrency", "8")
    processes.worker("--concurrency", "2")
    await eventually(
        lambda: redis_client.sismember(f"{settings.prefix}:queues", KIDS),
        until=bool,
        what="the kids' worker to declare its queue",
    )
    children = 30
    parent = await submit(
        run_store,
        "test.fan_in",
        input={"children": children, "queue": KIDS, "child_input": {"message": "hi"}},
    )
    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    kids = await spawned_ids(redis_client, settings.prefix, parent)
    assert len(kids) == children
    # measured from the runs' own event times; a lost wake shows as ~5 s (idle_wake_s)
    waited, ends = {}, []
    for kid in kids:
        by_type = {e.type: e.ts for e in await run_store.read_events(kid)}
        waited[kid] = (by_type["claimed"] - by_type["created"]).total_seconds()
        ends.append(by_type["succeeded"])
    slow = {kid: round(s, 2) for kid, s in waited.items() if s >= 2.5}
    assert not slow, f"children queued this long (s) beside free slots: {slow}"
    events = await run_store.read_events(parent)
    woke = next(e for e in events if e.type == "child_ended" and e.data["woke"])
    resumed = next(e for e in events if e.type == "claimed" and e.id > woke.id)
    lag_s = (resumed.ts - max(ends)).total_seconds()
    assert lag_s < 2.5, f"the parent resumed {lag_s:.2f} s after its last child ended"


async def test_a_child_record_gone_before_its_end_is_delivered_ends_the_join_as_failed(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    # no reconciler beside the worker: the children's ends wait in the outbox until one runs
    processes.worker("--concurrency", "4", LEASEHOLD_RECONCILER_ENABLED="false")
    signalled = {"handler": "test.await_signal", "child_input": {"name": "go"}}
    parent = await submit(
        run_store, "test.fan_in", input={"children": 2, "mode": "settled", **signalled}
    )
    kids = await spawned_ids(redis_client, settings.prefix, parent)
    await eventually(
        lambda: statuses(run_store, [parent, *kids]),
        until=lambda got: got == [RunStatus.WAITING] * 3,
        what="the parent parked in its join and both children parked on their signal",
    )
    waits = WaitStore.for_settings(redis_client, Scripts(), settings)
    for n, kid in enumerate(kids):
        await waits.signal(kid, "go", f'{{"n":{n}}}', max_pending=4)
    await eventually(
        lambda: statuses(run_store, kids),
        until=lambda got: got == [RunStatus.SUCCEEDED] * 2,
        what="both children to end",
    )
    keys = QueueKeys(settings.prefix, QUEUE)
    assert await redis_client.zcard(keys.outbox) == 2  # neither end delivered yet
    # an operator removes one child's keys by hand (or its retention ran out)
    await redis_client.delete(keys.run(kids[1]), keys.events(kids[1]))
    processes.spawn("reconciler", ["reconciler"])

    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output is not None
    joined = done.output["joined"]
    assert [(o["child_id"], o["status"]) for o in joined] == [
        (kids[0], "succeeded"),
        (kids[1], "failed"),
    ]
    assert joined[1]["error"]["code"] == "child_record_gone"
    ended = [e.data for e in await run_store.read_events(parent) if e.type == "child_ended"]
    assert [d["child_id"] for d in ended if d.get("reason") == "child_record_gone"] == [kids[1]]


async def test_a_queued_child_deleted_by_hand_ends_its_parents_join_as_child_record_gone(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    """No script ends a child whose record is deleted before it ended, so no outbox entry
    is written: the reconciler's check of parked joins finds it gone (no join timeout)."""
    await family_workers(processes, redis_client, settings.prefix, 1)  # one child runs
    sleepy = {"handler": "demo.sleep", "child_input": {"seconds": 120}, "queue": KIDS}
    parent = await submit(run_store, "test.fan_in", input={"children": 2, **sleepy})
    kids = await spawned_ids(redis_client, settings.prefix, parent)
    await eventually(
        lambda: statuses(run_store, [parent, *kids]),
        until=lambda got: got == [RunStatus.WAITING, RunStatus.RUNNING, RunStatus.QUEUED],
        what="the parent parked in its join, one child running and one queued",
    )
    keys = QueueKeys(settings.prefix, KIDS)
    # an operator deletes the queued child's keys by hand
    await redis_client.delete(keys.run(kids[1]), keys.events(kids[1]))

    done = await wait_status(run_store, parent, RunStatus.FAILED, RunStatus.SUCCEEDED)
    assert done.status == RunStatus.FAILED and done.error is not None
    assert done.error.code == "child_failed"
    assert done.error.details["child_id"] == kids[1]
    assert done.error.details["error"]["code"] == "child_record_gone"
    ended = [e.data for e in await run_store.read_events(parent) if e.type == "child_ended"]
    assert [(d["child_id"], d.get("reason")) for d in ended] == [(kids[1], "child_record_gone")]
