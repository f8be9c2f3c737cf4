"""The drift check with real processes: a deploy between a park and its wake.

A run of ``test.drift_steps`` parks on a signal under one build; its worker is stopped and a
worker of another build (the handler's steps in another order) wakes it. The replay
must not hand a recorded result to another step, call a side effect, or create a
child: the run parks in ``reconciliation_required`` with code ``version_drift``. A
person's retry then runs it on the new code.
"""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.stack.processes import Child
from tests.support.drift_handlers import effect_calls_key
from tests.support.polling import eventually
from tests.support.processes import Processes


def redeploy(processes: Processes, old: Child, **env: str) -> None:
    """A rolling deploy of one worker: SIGTERM (it drains), then a worker with ``env``."""
    old.signal(signal.SIGTERM)
    old.wait(30)
    processes.worker(**env)


async def status_of(client: httpx.AsyncClient, run_id: str, wanted: str) -> Any:
    async def probe() -> Any:
        return (await client.get(f"/runs/{run_id}")).json()

    return await eventually(probe, until=lambda run: run["status"] == wanted, what=wanted)


CASES = [
    # an effect moved: the run recorded a, the wait, b; the new code asks for b first
    pytest.param("e:a,w:go,e:b", "e:b,w:go,e:a", "e|a:1", "e|b:1", id="effect"),
    # two waits swapped: the recorded first wait's answer must not reach the second
    pytest.param("w:go,w:two", "w:two,w:go", "w|signal:go:1", "w|signal:two:1", id="wait"),
    # a step inserted before a spawn: no child is made under the shifted numbering
    pytest.param("s:kid,w:go", "e:a,s:kid,w:go", "s|spawn:1", "e|a:1", id="spawn"),
    # a join moved after a wait: the join's recorded outcome must not answer the wait
    pytest.param("s:kid,j:all,w:go", "s:kid,w:go,j:all", "j|join:1", "w|signal:go:1", id="join"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new", "recorded", "taken"), CASES)
async def test_a_reordered_handler_parks_as_version_drift_and_runs_nothing(
    processes: Processes,
    redis_client: aioredis.Redis,
    prefix: str,
    old: str,
    new: str,
    recorded: str,
    taken: str,
) -> None:
    _, api_url = processes.api()
    first = processes.worker(LEASEHOLD_TEST_STEPS=old, LEASEHOLD_BUILD_ID="v1")
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        run_id = (
            await client.post("/runs", json={"handler": "test.drift_steps", "input": {}})
        ).json()["id"]
        await status_of(client, run_id, "waiting")
        children_before = (await client.get(f"/runs/{run_id}/children")).json()["items"]
        redeploy(processes, first, LEASEHOLD_TEST_STEPS=new, LEASEHOLD_BUILD_ID="v2")
        sent = await client.post(f"/runs/{run_id}/signals/go", json={"payload": "now"})
        assert sent.status_code in (200, 202), sent.text
        parked = await status_of(client, run_id, "reconciliation_required")
        error = parked["error"]
        assert error["code"] == "version_drift", error
        assert error["details"]["position"] == (1 if recorded.startswith("j|") else 0)
        assert error["details"]["recorded"] == recorded
        assert error["details"]["taken"] == taken
        assert parked["build_id"] == "v2"
        # nothing ran under the shifted numbering: no new side effect, no new child
        calls = await redis_client.lrange(effect_calls_key(prefix, run_id), 0, -1)
        assert calls == (["a"] if old.startswith("e:a") else [])
        children = (await client.get(f"/runs/{run_id}/children")).json()["items"]
        assert [c["id"] for c in children] == [c["id"] for c in children_before]


@pytest.mark.slow
async def test_a_person_s_retry_of_a_drifted_run_runs_it_on_the_new_code(
    processes: Processes, redis_client: aioredis.Redis, prefix: str
) -> None:
    _, api_url = processes.api()
    first = processes.worker(LEASEHOLD_TEST_STEPS="e:a,w:go,e:b")
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        made = await client.post("/runs", json={"handler": "test.drift_steps", "input": {}})
        run_id = made.json()["id"]
        await status_of(client, run_id, "waiting")
        redeploy(processes, first, LEASEHOLD_TEST_STEPS="e:b,w:go,e:a")
        await client.post(f"/runs/{run_id}/signals/go", json={"payload": "now"})
        await status_of(client, run_id, "reconciliation_required")
        resolved = await client.post(f"/runs/{run_id}/resolve", json={"action": "retry"})
        assert resolved.status_code == 200, resolved.text
        done = await status_of(client, run_id, "succeeded")
    # the recorded order is forgotten; the records stay: a and the signal replay, b runs
    first_step, answer, last_step = done["output"]["done"]
    assert first_step.startswith("b done") and answer == "now" and last_step.startswith("a done")
    calls = await redis_client.lrange(effect_calls_key(prefix, run_id), 0, -1)
    assert calls == ["a", "b"]


@pytest.mark.slow
async def test_a_patched_change_runs_old_runs_the_old_way_and_new_runs_the_new(
    processes: Processes, redis_client: aioredis.Redis, prefix: str
) -> None:
    _, api_url = processes.api()
    old_worker = processes.worker()
    body = {"handler": "test.patched_steps", "input": {}}
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        old = (await client.post("/runs", json=body)).json()["id"]
        await status_of(client, old, "waiting")
        redeploy(processes, old_worker, LEASEHOLD_TEST_PATCHED="1", LEASEHOLD_BUILD_ID="v2")
        new = (await client.post("/runs", json=body)).json()["id"]
        await status_of(client, new, "waiting")
        for run_id in (old, new):
            await client.post(f"/runs/{run_id}/signals/go", json={"payload": "go"})
        old_run = await status_of(client, old, "succeeded")
        new_run = await status_of(client, new, "succeeded")
    assert old_run["output"] == {"done": ["a done", "go", "b done"], "swapped": False}
    assert new_run["output"] == {"done": ["b done", "go", "a done"], "swapped": True}
    assert await redis_client.lrange(effect_calls_key(prefix, old), 0, -1) == ["a", "b"]
    assert await redis_client.lrange(effect_calls_key(prefix, new), 0, -1) == ["b", "a"]


@pytest.mark.slow
async def test_a_takeover_by_another_build_mid_run_is_checked_too(
    processes: Processes, redis_client: aioredis.Redis, prefix: str
) -> None:
    """kill -9 of the owner inside a slow effect; a worker of another build takes the run
    over (on_lease_expired=retry) and asks for the slow effect first: version_drift, and
    neither effect is called again."""
    _, api_url = processes.api()
    owner = processes.worker(LEASEHOLD_TEST_STEPS="e:a,e:slow", LEASEHOLD_BUILD_ID="v1")
    body = {
        "handler": "test.drift_steps",
        "input": {},
        "on_lease_expired": "retry",
        "max_attempts": 2,
    }
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        run_id = (await client.post("/runs", json=body)).json()["id"]

        async def called() -> list[str]:
            found: list[str] = await redis_client.lrange(effect_calls_key(prefix, run_id), 0, -1)
            return found

        await eventually(called, until=lambda calls: calls == ["a", "slow"], what="in slow")
        owner.kill()
        processes.worker(LEASEHOLD_TEST_STEPS="e:slow,e:a", LEASEHOLD_BUILD_ID="v2")
        parked = await status_of(client, run_id, "reconciliation_required")
    assert parked["error"]["code"] == "version_drift"
    assert parked["error"]["details"]["recorded"] == "e|a:1"
    assert parked["build_id"] == "v2" and parked["attempt"] == 2
    assert await called() == ["a", "slow"]


@pytest.mark.slow
async def test_a_handler_that_now_ends_before_its_recorded_steps_is_drift(
    processes: Processes, redis_client: aioredis.Redis, prefix: str
) -> None:
    _, api_url = processes.api()
    first = processes.worker(LEASEHOLD_TEST_STEPS="e:a,w:go,e:b,w:two")
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        made = await client.post("/runs", json={"handler": "test.drift_steps", "input": {}})
        run_id = made.json()["id"]
        await status_of(client, run_id, "waiting")
        await client.post(f"/runs/{run_id}/signals/go", json={"payload": 1})

        async def parked_at_two() -> Any:
            return (await client.get(f"/runs/{run_id}")).json()

        await eventually(
            parked_at_two,
            until=lambda run: run["status"] == "waiting" and "two" in str(run["waiting_for"]),
            what="parked on two",
        )
        redeploy(processes, first, LEASEHOLD_TEST_STEPS="e:a,w:go")  # it stops after go
        await client.post(f"/runs/{run_id}/signals/two", json={"payload": 2})
        parked = await status_of(client, run_id, "reconciliation_required")
    details = parked["error"]["details"]
    assert parked["error"]["code"] == "version_drift"
    assert (details["position"], details["recorded"]) == (2, "e|b:1")
    assert await redis_client.lrange(effect_calls_key(prefix, run_id), 0, -1) == ["a", "b"]
