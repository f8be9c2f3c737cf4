"""The family invariants on hand-made snapshots: a doubled child, an unseen end, a live orphan."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from tools.chaos.checker import Snapshot, StoredRun
from tools.chaos.family import check_families, child_ids

pytestmark = pytest.mark.chaos

PARENT = "default.01JPARENT0000000000000000A"


def parent(status: str = "succeeded", seen: dict[str, str] | None = None) -> StoredRun:
    output = {"children": [{"id": k, "status": v} for k, v in (seen or {}).items()]}
    fields = {
        "status": status,
        "handler": "chaos.family",
        "input": json.dumps({"children": 2}),
        "output": json.dumps(output),
    }
    return StoredRun(PARENT, fields, [])


def kid(n: int, status: str = "succeeded") -> StoredRun:
    return StoredRun(f"default.01JKID{n:020d}", {"status": status, "parent_id": PARENT}, [])


def snapshot(*runs: StoredRun) -> Snapshot:
    return Snapshot({run.id: run for run in runs}, now_ms=10_000)


async def test_a_family_that_kept_its_promises_passes(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    a, b = kid(1), kid(2, "failed")
    await redis_client.zadd(QueueKeys(prefix, "default").children(PARENT), {a.id: 1, b.id: 2})
    whole = snapshot(parent(seen={a.id: "succeeded", b.id: "failed"}), a, b)
    assert await check_families(redis_client, prefix, whole) == []
    assert child_ids(whole) == {a.id, b.id}


async def test_a_third_child_of_two_steps_is_doubled(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    kids = [kid(1), kid(2), kid(3)]
    seen = {k.id: "succeeded" for k in kids}
    found = await check_families(redis_client, prefix, snapshot(parent(seen=seen), *kids))
    assert [v.kind for v in found] == ["child_doubled"]


async def test_an_end_the_parent_never_saw_is_named(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    a, b = kid(1), kid(2, "orphaned")
    seen = {a.id: "succeeded", b.id: "succeeded"}  # b's end did not reach it as it was
    found = await check_families(redis_client, prefix, snapshot(parent(seen=seen), a, b))
    assert [v.kind for v in found] == ["child_outcome_unseen"]


async def test_a_live_child_of_an_ended_parent_is_left_running(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    a = kid(1, "running")
    found = await check_families(redis_client, prefix, snapshot(parent("failed"), a))
    assert [(v.kind, v.run_id) for v in found] == [("child_left_running", a.id)]


async def test_a_child_the_janitor_deleted_after_its_parent_saw_it_is_not_unseen(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    # the soak's purge takes finished runs, children too: the parent saw the child's
    # end, then the child's record went; only a child nobody deleted must be there
    a, b = kid(1), kid(2, "orphaned")
    seen = {a.id: "succeeded", b.id: "orphaned"}
    only_a = snapshot(parent(seen=seen), a)
    assert await check_families(redis_client, prefix, only_a, lambda run_id: run_id == b.id) == []
    found = await check_families(redis_client, prefix, only_a, lambda run_id: False)
    assert [v.kind for v in found] == ["child_outcome_unseen"]
