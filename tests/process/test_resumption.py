"""Runs continue where they were, and never repeat a side effect: real workers, real signals.

Every side effect is counted through a Redis list the test owns (see
tests/support/effect_handlers.py), not through Leasehold's own records.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from typing import Any

import httpx
import redis.asyncio as aioredis

from app.models import RunEvent, RunStatus
from app.stack.processes import Child
from app.store.lua.scripts import Scripts
from app.store.progress.store import ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.effect_handlers import calls_key, steps_key
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

SQUARES = [1, 4, 9, 16, 25]


async def submit(run_store: RunStore, handler: str, **options: Any) -> str:
    input = options.pop("input", {})
    return (await run_store.create(NewRun(handler=handler, input=input, **options))).run.id


async def submit_charge(run_store: RunStore, **input: Any) -> str:
    """A ``test.charge`` run the reconciler retries when its owner's lease expires."""
    return await submit(
        run_store, "test.charge", input=input, on_lease_expired="retry", max_attempts=3
    )


async def wait_event(run_store: RunStore, run_id: str, kind: str, **data: Any) -> RunEvent:
    """The first event of this type whose data includes ``data``."""

    def find(events: list[RunEvent]) -> RunEvent | None:
        for event in events:
            if event.type == kind and data.items() <= event.data.items():
                return event
        return None

    events = await eventually(
        lambda: run_store.read_events(run_id),
        until=lambda events: find(events) is not None,
        what=f"a {kind} event with {data}",
    )
    found = find(events)
    assert found is not None
    return found


async def side_channel(redis_client: aioredis.Redis, key: str) -> list[str]:
    return list(await redis_client.lrange(key, 0, -1))


async def wait_calls(redis_client: aioredis.Redis, key: str, count: int) -> list[str]:
    return await eventually(
        lambda: side_channel(redis_client, key),
        until=lambda calls: len(calls) >= count,
        what=f"{count} real side-effect calls",
    )


async def wait_log(proc: Child, *needles: str) -> str:
    return await eventually(
        lambda: asyncio.sleep(0, proc.log()),
        until=lambda log: any(needle in log for needle in needles),
        what=f"{proc.name} to log one of {needles}",
    )


def progress_store(run_store: RunStore) -> ProgressStore:
    return ProgressStore(replace(run_store.ctx, scripts=Scripts(), events_maxlen=1000))


async def test_a_killed_run_resumes_from_its_last_checkpoint_with_the_same_output(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    doomed = processes.worker()
    run_id = await submit(
        run_store,
        "test.steps",
        input={"hang_after_step": 3},
        on_lease_expired="retry",
        max_attempts=3,
    )
    await wait_event(run_store, run_id, "checkpoint", seq=3)
    processes.worker()
    doomed.signal(signal.SIGKILL)
    resumed = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
    assert resumed.status == RunStatus.SUCCEEDED
    assert resumed.attempt == 2
    # attempt 2 started at step 3's checkpoint: steps 1-3 ran once, never again
    executed = await side_channel(redis_client, steps_key(prefix, run_id))
    assert executed == ["1:1", "1:2", "1:3", "2:4", "2:5"]
    uninterrupted = await submit(run_store, "test.steps")
    done = await wait_status(run_store, uninterrupted, RunStatus.SUCCEEDED)
    assert resumed.output == done.output == {"values": SQUARES}


async def test_a_drained_run_is_released_and_continues_from_its_checkpoint_elsewhere(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    draining = processes.worker(LEASEHOLD_DRAIN_TIMEOUT_S="0.2")
    run_id = await submit(run_store, "test.steps", input={"hang_after_step": 2})
    await wait_event(run_store, run_id, "checkpoint", seq=2)
    processes.worker()
    draining.signal(signal.SIGTERM)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    assert done.output == {"values": SQUARES}
    executed = await side_channel(redis_client, steps_key(prefix, run_id))
    # a release keeps the attempt number: the second owner simply carries on
    assert executed == ["1:1", "1:2", "1:3", "1:4", "1:5"]
    kinds = [event.type for event in await run_store.read_events(run_id)]
    assert kinds.count("released") == 1
    assert draining.wait(timeout_s=15) == 0


async def test_an_effect_completed_before_a_kill_is_not_executed_again(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    first = processes.worker()
    run_id = await submit_charge(run_store, hang="after")
    recorded = await wait_event(run_store, run_id, "effect", phase="recorded")
    processes.worker()
    first.signal(signal.SIGKILL)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
    assert done.status == RunStatus.SUCCEEDED
    calls = await side_channel(redis_client, calls_key(prefix, run_id))
    assert calls == [f"{run_id}:charge:1"]
    # the second attempt got the first attempt's recorded result, not a new one
    receipt = done.output["receipt"]
    assert receipt["fence"] == recorded.fence == 1
    assert receipt["charged_by"] != done.owner_id
    await wait_event(run_store, run_id, "effect", phase="replayed")


async def test_a_retried_handler_error_replays_the_effect_it_completed(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    processes.worker()
    run_id = await submit(run_store, "test.charge", input={"fail_after": True}, max_attempts=2)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED
    assert done.attempt == 2
    assert done.output["receipt"]["fence"] == 1
    assert len(await side_channel(redis_client, calls_key(prefix, run_id))) == 1


async def test_a_kill_inside_a_non_idempotent_effect_parks_the_run_for_a_person(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    owner = processes.worker()
    run_id = await submit_charge(run_store, hang="inside")
    running = await wait_status(run_store, run_id, RunStatus.RUNNING)
    await wait_calls(redis_client, calls_key(prefix, run_id), 1)
    _, url = processes.api()
    processes.worker()
    owner.signal(signal.SIGKILL)
    parked = await wait_status(run_store, run_id, RunStatus.RECONCILIATION_REQUIRED)
    assert parked.error is not None
    assert parked.error.code == "effect_outcome_unknown"
    evidence = parked.error.details
    assert evidence["effect"]["name"] == "charge"
    assert evidence["effect"]["key"] == f"{run_id}:charge:1"
    assert evidence["effect"]["owner_id"] == running.owner_id
    assert evidence["detected_by"] == "reconciler"
    assert evidence["owner_id"] == running.owner_id
    kinds = [event.type for event in await run_store.read_events(run_id)]
    assert kinds[-1] == "reconciliation_required"
    assert "requeued" not in kinds  # on_lease_expired said retry; the effect said no

    # a person checks the payment provider: it did happen; retry without repeating it
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post(
            f"/runs/{run_id}/resolve",
            json={
                "action": "retry",
                "effect_outcome": "applied",
                "effect_result": {"charged_by": "provider dashboard"},
            },
        )
    assert response.status_code == 200
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    assert done.output == {"receipt": {"charged_by": "provider dashboard"}}
    assert await side_channel(redis_client, calls_key(prefix, run_id)) == [f"{run_id}:charge:1"]


async def test_a_kill_inside_an_idempotent_effect_re_executes_it_once_with_the_same_key(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    owner = processes.worker()
    run_id = await submit_charge(run_store, hang="inside", idempotent=True)
    await wait_calls(redis_client, calls_key(prefix, run_id), 1)
    processes.worker()
    owner.signal(signal.SIGKILL)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.ORPHANED)
    assert done.status == RunStatus.SUCCEEDED
    key = f"{run_id}:charge:1"
    assert await side_channel(redis_client, calls_key(prefix, run_id)) == [key, key]
    assert done.output["receipt"]["key"] == key
    await wait_event(run_store, run_id, "effect", phase="started", starts=2)


async def test_a_drain_inside_a_non_idempotent_effect_is_parked_by_the_next_owner(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    draining = processes.worker(LEASEHOLD_DRAIN_TIMEOUT_S="0.2")
    run_id = await submit(run_store, "test.charge", input={"hang": "inside"})
    await wait_calls(redis_client, calls_key(prefix, run_id), 1)
    processes.worker()
    draining.signal(signal.SIGTERM)
    parked = await wait_status(run_store, run_id, RunStatus.RECONCILIATION_REQUIRED)
    assert parked.error is not None
    assert parked.error.details["detected_by"] == "executor"
    assert parked.error.details["effect"]["key"] == f"{run_id}:charge:1"
    assert len(await side_channel(redis_client, calls_key(prefix, run_id))) == 1
    kinds = [event.type for event in await run_store.read_events(run_id)]
    assert kinds[-3:] == ["released", "claimed", "reconciliation_required"]


async def test_a_paused_owner_cannot_overwrite_the_takeover_owners_effect_checkpoint_or_result(
    processes: Processes, run_store: RunStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    stale = processes.worker()
    # a blocking call that outlasts the pause: when the owner wakes, it returns
    run_id = await submit_charge(run_store, idempotent=True, blocking_stall_s=1.0)
    first = await wait_status(run_store, run_id, RunStatus.RUNNING)
    await wait_calls(redis_client, calls_key(prefix, run_id), 1)
    stale.signal(signal.SIGSTOP)
    processes.worker()
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
    new_owner = done.output["receipt"]["charged_by"]
    assert new_owner != first.owner_id
    events_at_finish = await run_store.read_events(run_id)
    state_at_finish = await redis_client.hget(run_store.keys("default").run(run_id), "state")

    stale.signal(signal.SIGCONT)
    # it wakes inside its effect call: Redis rejects the result it writes, and its
    # renewal answers LOST, so it stops without its checkpoint or terminal write
    await wait_log(stale, "effect result rejected: lease lost")
    await wait_log(stale, "run stopped without writing")
    after = await run_store.get(run_id)
    assert after.output == done.output
    assert after.fence == done.fence
    assert await run_store.read_events(run_id) == events_at_finish
    assert all(
        event.fence != first.fence
        for event in events_at_finish
        if event.type == "effect" and event.data["phase"] == "recorded"
    )
    state = await redis_client.hget(run_store.keys("default").run(run_id), "state")
    assert state == state_at_finish
    assert new_owner in state
    records = await progress_store(run_store).effects("default", run_id)
    assert records["charge:1"]["result"]["charged_by"] == new_owner
    assert records["charge:1"]["owner_id"] == new_owner
    assert await side_channel(redis_client, calls_key(prefix, run_id)) == [f"{run_id}:charge:1"] * 2


def delay_ms(event: RunEvent) -> int:
    """How long a requeued run waits: its run_at_ms minus the Redis time of the event."""
    return int(event.data["run_at_ms"]) - round(event.ts.timestamp() * 1000)


async def test_retryable_failures_back_off_with_growing_delays_until_success(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker(LEASEHOLD_RETRY_BACKOFF_S="0.2")
    run_id = await submit(run_store, "test.flaky", input={"fail_times": 2}, max_attempts=3)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED
    assert done.output == {"attempt": 3}
    events = await run_store.read_events(run_id)
    requeued = [event for event in events if event.type == "requeued"]
    assert [event.data["attempt"] for event in requeued] == [2, 3]
    assert all(event.data["error"]["code"] == "handler_error" for event in requeued)
    assert all(event.data["error"]["retryable"] for event in requeued)
    first, second = (delay_ms(event) for event in requeued)
    assert 100 <= first <= 200 <= second <= 400
    assert first < second
    # each retry ran no earlier than announced
    claims = [event for event in events if event.type == "claimed"][1:]
    for announced, claimed in zip(requeued, claims, strict=True):
        assert round(claimed.ts.timestamp() * 1000) >= announced.data["run_at_ms"]


async def test_a_non_retryable_failure_is_not_retried(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker()
    run_id = await submit(
        run_store, "test.flaky", input={"fail_times": 1, "retryable": False}, max_attempts=3
    )
    failed = await wait_status(run_store, run_id, RunStatus.FAILED, RunStatus.SUCCEEDED)
    assert failed.status == RunStatus.FAILED
    assert failed.attempt == 1
    assert failed.error is not None
    assert (failed.error.code, failed.error.retryable) == ("rejected", False)
    kinds = [event.type for event in await run_store.read_events(run_id)]
    assert kinds == ["created", "claimed", "failed"]
