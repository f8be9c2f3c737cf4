"""Durable sleeps, signals and questions with real workers: park, kill -9, wake elsewhere.

What each attempt really did is counted through a Redis list the test owns
(tests/support/wait_handlers.py), not through Leasehold's records.
"""

from __future__ import annotations

import signal
from typing import Any

import redis.asyncio as aioredis

from app.models import RunEvent, RunStatus
from app.settings import Settings
from app.store.keys import QueueKeys
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import SignalDelivery, WaitStore
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes
from tests.support.wait_handlers import trail_key


async def submit(run_store: RunStore, handler: str, **input: Any) -> str:
    return (await run_store.create(NewRun(handler=handler, input=input))).run.id


async def events_until(
    run_store: RunStore, run_id: str, kind: str, count: int = 1
) -> list[RunEvent]:
    """The run's events once ``count`` of type ``kind`` are among them."""
    return await eventually(
        lambda: run_store.read_events(run_id),
        until=lambda events: [e.type for e in events].count(kind) >= count,
        what=f"{count} {kind} event(s)",
    )


def waits(settings: Settings, client: aioredis.Redis) -> WaitStore:
    return WaitStore.for_settings(client, Scripts(), settings)


async def trail(client: aioredis.Redis, prefix: str, run_id: str) -> list[str]:
    return list(await client.lrange(trail_key(prefix, run_id), 0, -1))


async def test_a_sleeping_run_holds_nothing_and_wakes_on_another_worker_after_a_kill(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    sleeper = processes.worker("--concurrency", "1")
    run_id = await submit(run_store, "test.nap", seconds=5)
    (wait,) = [e for e in await events_until(run_store, run_id, "wait") if e.type == "wait"]
    assert wait.data["kind"] == "sleep"
    until_ms = wait.data["until_ms"]
    assert until_ms - int(wait.ts.timestamp() * 1000) in range(4990, 5010)

    # parked: no lease, no owner, nothing in the worker's one slot
    parked = await run_store.get(run_id)
    assert parked.status == RunStatus.WAITING
    assert parked.owner_id is None
    assert parked.waiting_for is not None and parked.waiting_for["until_ms"] == until_ms
    keys = QueueKeys(settings.prefix, "default")
    assert await redis_client.zscore(keys.leases, run_id) is None
    assert await redis_client.zscore(keys.delayed, run_id) == until_ms
    other = await submit(run_store, "demo.echo", message="the slot is free")
    assert (await wait_status(run_store, other, RunStatus.SUCCEEDED)).output is not None

    sleeper.signal(signal.SIGKILL)
    assert sleeper.wait(timeout_s=10) is not None
    processes.worker()
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED
    assert done.output is not None
    assert done.output["state"] == {"worked": True}  # resumed from its checkpoint
    events = await run_store.read_events(run_id)
    woke = [e for e in events if e.type == "claimed"][-1]
    assert woke.ts.timestamp() * 1000 >= until_ms  # by the Redis clock, not before its time
    assert [e.fence for e in events if e.type in ("claimed", "wait")] == [1, 2, 3]
    steps = await trail(redis_client, settings.prefix, run_id)
    first_owner = steps[0].split(":", 2)[2]
    assert [s.rsplit(":", 1)[0] for s in steps if "work" in s] == ["1:work"]  # once
    assert [s.split(":")[1] for s in steps] == ["work", "sleep", "sleep", "woke"]
    assert done.owner_id != first_owner
    assert steps[-1] == f"3:woke:{done.owner_id}"


async def test_signals_sent_before_and_after_their_wait_both_arrive(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    store = waits(settings, redis_client)
    run_id = await submit(run_store, "test.two_signals")
    # before any worker runs it: kept in the run's inbox
    assert await store.signal(run_id, "a", '{"n":1}', max_pending=4) == (
        SignalDelivery.BUFFERED,
        False,
    )
    processes.worker()
    events = await events_until(run_store, run_id, "wait")
    assert [e.data["subject"] for e in events if e.type == "wait"] == ["b"]  # a was taken at once
    waiting = await run_store.get(run_id)
    assert waiting.status == RunStatus.WAITING
    assert await store.signal(run_id, "b", '{"n":2}', max_pending=4) == (
        SignalDelivery.DELIVERED,
        False,
    )
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.output == {"first": {"n": 1}, "second": {"n": 2}}
    # the second attempt replayed a's recorded payload without waiting for it again
    steps = await trail(redis_client, settings.prefix, run_id)
    assert [s.rsplit(":", 1)[0] for s in steps] == ["1:got-a", "3:got-a"]
    signals = [e.data for e in await run_store.read_events(run_id) if e.type == "signal"]
    assert [(s["name"], s["delivered"]) for s in signals] == [("a", False), ("b", True)]


async def test_a_signal_timeout_fails_the_run_typed_or_is_caught_by_the_handler(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    failing = await submit(run_store, "test.await_signal", timeout_s=1)
    caught = await submit(run_store, "test.await_signal", timeout_s=1, catch_timeout=True)
    failed = await wait_status(run_store, failing, RunStatus.FAILED, RunStatus.SUCCEEDED)
    assert failed.error is not None
    assert failed.error.code == "signal_timeout"
    assert failed.error.retryable is False
    assert failed.error.details["name"] == "go"
    done = await wait_status(run_store, caught, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.output == {"timed_out": True}


async def test_ask_human_parks_with_the_question_and_returns_the_resumed_answer(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    run_id = await submit(run_store, "test.ask", question={"approve": "refund 30 EUR?"})
    parked = await wait_status(run_store, run_id, RunStatus.WAITING_HUMAN)
    assert parked.escalation is not None
    assert parked.escalation["reason"] == "ask_human"
    assert parked.escalation["question"] == {"approve": "refund 30 EUR?"}
    event = (await events_until(run_store, run_id, "waiting_human"))[-1]
    assert event.data["question"] == {"approve": "refund 30 EUR?"}
    await run_store.resume(run_id, {"approved": True})
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.output == {"answer": {"approved": True}}


HOSTILE_WAITS: list[dict[str, Any]] = [
    {"kind": "sleep", "value": -1},
    {"kind": "sleep", "value": "nan"},
    {"kind": "sleep", "value": "inf"},
    {"kind": "sleep", "value": 1e300},
    {"kind": "sleep", "value": True},
    {"kind": "sleep_until", "value": "tomorrow"},
    {"kind": "sleep_until", "value": 1e300},
    {"kind": "timeout", "value": "-inf"},
    {"kind": "name", "value": "no spaces"},
    {"kind": "name", "value": "a:b"},
    {"kind": "name", "value": ""},
    {"kind": "name", "value": "n" * 129},
    {"kind": "question", "value": 70_000},  # over LEASEHOLD_MAX_EVENT_BYTES
]


async def test_hostile_waits_fail_the_run_as_invalid_wait_and_never_park_it(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker("--concurrency", "4")
    run_ids = [await submit(run_store, "test.bad_wait", **case) for case in HOSTILE_WAITS]
    for run_id, case in zip(run_ids, HOSTILE_WAITS, strict=True):
        run = await wait_status(run_store, run_id, RunStatus.FAILED, RunStatus.SUCCEEDED)
        assert run.error is not None and run.error.code == "invalid_wait", case
        kinds = [e.type for e in await run_store.read_events(run_id)]
        assert "wait" not in kinds and "waiting_human" not in kinds, case


async def test_a_sync_handler_sleeps_and_waits_for_a_signal_durably_too(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, settings: Settings
) -> None:
    processes.worker()
    run_id = await submit(run_store, "test.sync_nap", seconds=0.5)
    waiting = await eventually(
        lambda: run_store.get(run_id),
        until=lambda run: (run.waiting_for or {}).get("kind") == "signal",
        what="the sync handler to wait for its signal",
    )
    assert waiting.status == RunStatus.WAITING and waiting.owner_id is None
    await waits(settings, redis_client).signal(run_id, "go", '"on"', max_pending=4)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    # claimed, parked (sleep), claimed, parked (signal), claimed: fence 5
    assert done.output == {"payload": "on", "fence": 5}
