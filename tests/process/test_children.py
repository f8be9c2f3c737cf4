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
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.runs import NewRun, RunStore
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
        input={"children": 2, "hang_after_spawn": True},
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
        assert detail in done.error.details, done.error
        assert await runs_where(redis_client, settings.prefix, "parent_id", parent) == []
