"""The flow-control invariants on hand-made histories: over a key's limit, a leaked slot."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.store.keys import QueueKeys
from tools.chaos.checker import Event, Snapshot, StoredRun
from tools.chaos.flow import check_key_limits, check_no_recount, check_slots_returned

pytestmark = pytest.mark.chaos


def keyed(run_id: str, key: str, *events: tuple[str, int]) -> StoredRun:
    """A run of ``key`` whose events happen at the given Redis ms."""
    stored = [Event(f"{ms}-0", kind, 1, {}) for kind, ms in events]
    return StoredRun(run_id, {"status": "succeeded", "ckey": key}, stored)


def snapshot(*runs: StoredRun) -> Snapshot:
    return Snapshot({run.id: run for run in runs}, now_ms=10_000)


def test_runs_of_a_key_within_its_limit_pass_and_one_over_is_named() -> None:
    a = keyed("a", "t", ("claimed", 100), ("succeeded", 300))
    b = keyed("b", "t", ("claimed", 200), ("lease_expired", 400), ("claimed", 500))
    handed_over = keyed("c", "t", ("claimed", 300), ("released", 450))  # starts as a ends
    other_key = keyed("d", "u", ("claimed", 250), ("failed", 260))
    assert check_key_limits(snapshot(a, b, handed_over, other_key), limit=2) == []
    third = keyed("e", "t", ("claimed", 250), ("succeeded", 260))
    (found,) = check_key_limits(snapshot(a, b, handed_over, third), limit=2)
    assert found.kind == "key_over_limit" and "key t: 3 running at 250 ms" in found.detail


def test_a_hold_claimed_and_ended_in_one_millisecond_is_not_held_after_it() -> None:
    # the soak's false alarm: a retry claimed and failed at 7856 ms stayed "running"
    # (its end sorted before its own start) and made a third of two at 8453 ms
    a = keyed("a", "t", ("claimed", 100), ("succeeded", 900))
    blink = keyed("b", "t", ("claimed", 300), ("failed", 300))
    later = keyed("c", "t", ("claimed", 500), ("succeeded", 600))
    assert check_key_limits(snapshot(a, blink, later), limit=2) == []
    third = keyed("d", "t", ("claimed", 550), ("succeeded", 560))
    (found,) = check_key_limits(snapshot(a, blink, later, third), limit=2)
    assert "key t: 3 running at 550 ms" in found.detail
    assert "'b'" not in found.detail


def test_a_run_still_running_at_the_snapshot_holds_its_slot_until_then() -> None:
    open_run = keyed("a", "t", ("claimed", 100))
    late = keyed("b", "t", ("claimed", 9_000), ("succeeded", 9_500))
    assert [v.kind for v in check_key_limits(snapshot(open_run, late), limit=1)] == [
        "key_over_limit"
    ]


async def test_a_counter_left_behind_is_a_leaked_slot(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = QueueKeys(prefix, "default")
    assert await check_slots_returned(redis_client, prefix, "default", snapshot()) == []
    await redis_client.hset(keys.slots, "k:t", 1)
    (found,) = await check_slots_returned(redis_client, prefix, "default", snapshot())
    assert found.kind == "slot_leaked" and "k:t" in found.detail


def test_a_recount_in_a_workers_log_is_reported_unless_redis_lost_writes() -> None:
    logs = {"worker-0": "slot counter k:t of queue default said '1', its leases hold '': recounted"}
    assert [v.kind for v in check_no_recount(logs, redis_restarted=False)] == ["slot_recounted"]
    assert check_no_recount(logs, redis_restarted=True) == []


def test_a_durable_sleep_ends_the_hold_and_a_handler_wait_does_not() -> None:
    def napping(run_id: str, *events: tuple[str, int, int]) -> StoredRun:
        stored = [Event(f"{ms}-0", kind, fence, {}) for kind, ms, fence in events]
        return StoredRun(run_id, {"status": "succeeded", "ckey": "t"}, stored)

    # claimed at fence 1, parked by park_run (its wait at fence 2), claimed again at 3
    nap = napping(
        "a", ("claimed", 100, 1), ("wait", 200, 2), ("claimed", 900, 3), ("succeeded", 950, 3)
    )
    other = napping("b", ("claimed", 300, 1), ("succeeded", 400, 1))
    assert check_key_limits(snapshot(nap, other), limit=1) == []
    # a handler's operation wait keeps the claim's fence: the slot is still held
    tool = napping("c", ("claimed", 100, 1), ("wait", 200, 1), ("succeeded", 800, 1))
    assert [v.kind for v in check_key_limits(snapshot(tool, other), limit=1)] == ["key_over_limit"]
