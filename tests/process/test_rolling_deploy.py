"""A rolling deploy with real processes (issue 36): build A's workers hold pinned runs,
parked and running, build B's workers start beside them, A's are drained with SIGTERM.

Pinned runs resume only on A while an A worker lives; with A gone they wait visibly
(``build_unavailable``) until an upgrade moves them to B; runs that are not pinned go
to whichever build claims them next. ``GET /builds`` says A drained exactly when no
open run is pinned to it any more.
"""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from tests.support.drift_handlers import effect_calls_key
from tests.support.polling import eventually
from tests.support.processes import Processes

STEPS = {"LEASEHOLD_TEST_STEPS": "w:go,e:a"}  # park on a signal, then one effect
# the parked mix: each kind of durable wait, PER_KIND pinned runs of each
PARKED = {
    "signal": "w:go,e:a",
    "person": "h:ok?,e:a",
    "sleep": "z:4,e:a",
    "join": "s:kid,w:go,j:all,e:a",
}
PER_KIND, AUTO, RUNNING = 4, 4, 8


async def runs_in(client: httpx.AsyncClient, ids: list[str], status: str) -> list[Any]:
    """Poll until every run of ``ids`` is ``status``; their records."""

    async def look() -> list[Any]:
        return [(await client.get(f"/runs/{run_id}")).json() for run_id in ids]

    return await eventually(
        look, until=lambda runs: all(r["status"] == status for r in runs), what=status
    )


async def create(client: httpx.AsyncClient, count: int, **body: Any) -> list[str]:
    ids = []
    for _ in range(count):
        made = await client.post("/runs", json={"input": {}, **body})
        assert made.status_code == 201, made.text
        ids.append(made.json()["id"])
    return ids


async def wake(client: httpx.AsyncClient, ids: list[str], kind: str) -> None:
    """What each parked kind waits for: the signal, the person's answer (a join's children
    ended already: its parent waits on the signal after them; a sleep wakes by itself)."""
    for run_id in ids:
        if kind == "person":
            sent = await client.post(f"/runs/{run_id}/resume", json={"input": "yes"})
        elif kind in ("signal", "join"):
            sent = await client.post(f"/runs/{run_id}/signals/go", json={"payload": "go"})
        else:
            continue
        assert sent.status_code in (200, 202), sent.text


async def build(client: httpx.AsyncClient, build_id: str) -> Any:
    return (await client.get(f"/builds/{build_id}")).json()


async def park_the_mix(client: httpx.AsyncClient) -> dict[str, list[str]]:
    """PER_KIND pinned runs of each parked kind, parked; a sleep's is still asleep."""
    parked = {}
    for kind, steps in PARKED.items():
        body = {"handler": "test.drift_steps", "versioning": "pinned", "input": {"steps": steps}}
        parked[kind] = await create(client, PER_KIND, **body)
    for kind, ids in parked.items():
        await runs_in(client, ids, "waiting_human" if kind == "person" else "waiting")
    return parked


async def wake_with_a_gone(
    client: httpx.AsyncClient, parked: dict[str, list[str]], auto: list[str]
) -> list[str]:
    """Wake the rest of the parked runs once A is gone: the auto_upgrade ones run on B,
    the pinned ones wait in A's lanes, each told why (blocked_on b:A); those returned."""
    rest = {kind: ids[PER_KIND // 2 :] for kind, ids in parked.items() if kind != "sleep"}
    for kind, ids in rest.items():
        await wake(client, ids, kind)
    await wake(client, auto, "signal")
    for done in await runs_in(client, auto, "succeeded"):
        assert done["build_id"] == "B" and done["pinned_build"] is None
    woken = [run_id for ids in rest.values() for run_id in ids]
    for run in await runs_in(client, woken, "queued"):
        assert run["pinned_build"] == "A" and run["build_id"] == "A"
    # the sleepers' time came meanwhile: they wait in A's lanes too (still `waiting`)
    stranded = woken + parked["sleep"]

    async def told() -> Any:
        return [(await client.get(f"/runs/{run_id}")).json() for run_id in stranded]

    for run in await eventually(
        told, until=lambda runs: all(r["blocked_on"] == "b:A" for r in runs), what="told"
    ):
        assert run["pinned_build"] == "A" and run["build_id"] == "A"
    return stranded


@pytest.mark.slow
async def test_a_rolling_deploy_keeps_pinned_runs_on_their_build_until_upgraded(
    processes: Processes,
) -> None:
    _, api_url = processes.api()
    old = [processes.worker(LEASEHOLD_BUILD_ID="A", **STEPS) for _ in range(2)]
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        parked = await park_the_mix(client)
        auto = await create(client, AUTO, handler="test.drift_steps")
        await runs_in(client, auto, "waiting")
        running = await create(
            client, RUNNING, handler="demo.sleep", versioning="pinned", input={"seconds": 3}
        )
        await runs_in(client, running, "running")
        every_pinned = [run_id for ids in parked.values() for run_id in ids] + running
        holding = await build(client, "A")
        assert holding["drained"] is False
        assert holding["pinned"]["parked"] == len(PARKED) * PER_KIND
        assert holding["pinned"]["running"] == RUNNING

        # B's workers start beside A's: half of each parked kind, woken now, runs on A
        for _ in range(2):
            processes.worker(LEASEHOLD_BUILD_ID="B", **STEPS)
        first = {kind: ids[: PER_KIND // 2] for kind, ids in parked.items() if kind != "sleep"}
        for kind, ids in first.items():
            await wake(client, ids, kind)
        woken_on_a = [run_id for ids in first.values() for run_id in ids] + running
        for done in await runs_in(client, woken_on_a, "succeeded"):
            assert done["build_id"] == "A", done

        # A drains and stops: what is pinned to it waits, visibly, instead of running on B
        for child in old:
            child.signal(signal.SIGTERM)
        for child in old:
            child.wait(60)
        stranded = await wake_with_a_gone(client, parked, auto)
        queue = (await client.get("/queues/default")).json()
        assert queue["build_unavailable"] == {"A": len(stranded)}
        assert (await build(client, "A"))["drained"] is False

        # the operator moves them on: they resume on B, and A is drained exactly then
        upgraded = (await client.post("/builds/A/upgrade", json={})).json()
        assert upgraded == {"build_id": "A", "upgraded": len(stranded), "remaining": 0}
        assert (await build(client, "A"))["drained"] is True
        for done in await runs_in(client, stranded, "succeeded"):
            assert done["build_id"] == "B" and done["pinned_build"] == "B"
        runs = [(await client.get(f"/runs/{run_id}")).json() for run_id in every_pinned]
        assert all(run["status"] == "succeeded" for run in runs)


@pytest.mark.slow
async def test_a_pinned_run_whose_owner_is_killed_waits_for_its_build_then_drift_holds(
    processes: Processes, redis_client: aioredis.Redis, prefix: str
) -> None:
    """kill -9 of a pinned run's owner inside a slow effect, with only another build alive:
    the retried run waits for its build (build_unavailable) instead of running on the
    other; upgraded, it meets the other build's reordered code and parks version_drift,
    neither effect called again."""
    _, api_url = processes.api()
    owner = processes.worker(LEASEHOLD_TEST_STEPS="e:a,e:slow", LEASEHOLD_BUILD_ID="A")
    processes.worker(LEASEHOLD_TEST_STEPS="e:slow,e:a", LEASEHOLD_BUILD_ID="B")
    body = {
        "handler": "test.drift_steps",
        "input": {},
        "on_lease_expired": "retry",
        "max_attempts": 3,
        "versioning": "pinned",
    }
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        run_id = ""
        while True:  # the run must start on A: B's claim of an unpinned new run is fair game
            run_id = (await client.post("/runs", json=body)).json()["id"]
            started = await runs_in(client, [run_id], "running")
            if started[0]["build_id"] == "A":
                break
            await client.post(f"/runs/{run_id}/cancel")
        calls_key = effect_calls_key(prefix, run_id)

        async def called() -> list[str]:
            found: list[str] = await redis_client.lrange(calls_key, 0, -1)
            return found

        await eventually(called, until=lambda calls: calls == ["a", "slow"], what="in slow")
        owner.kill()

        async def told() -> Any:
            return (await client.get(f"/runs/{run_id}")).json()

        waiting = await eventually(
            told, until=lambda run: run.get("blocked_on") == "b:A", what="build_unavailable"
        )
        assert waiting["status"] == "queued" and waiting["pinned_build"] == "A"
        assert waiting["attempt"] == 2 and waiting["build_id"] == "A"  # B never claimed it
        moved = await client.post(f"/runs/{run_id}/upgrade", json={})
        assert moved.status_code == 200, moved.text
        parked = (await runs_in(client, [run_id], "reconciliation_required"))[0]
    assert parked["error"]["code"] == "version_drift"
    assert parked["build_id"] == "B" and parked["pinned_build"] == "B"
    assert await called() == ["a", "slow"]
