"""Build pinning in the scripts (issue 36), against a real redis-server: a pinned run's
first claim pins it to the claiming build, only that build's claims take it again, an
upgrade moves it, finalize forgets it, and a build no worker has is said aloud."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.settings import Settings
from app.store.builds.store import BuildStore, PinnedRuns
from app.store.leases.store import Lease, LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

Q = "default"


@pytest.fixture
def builds(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> BuildStore:
    return BuildStore.for_settings(redis_client, scripts, settings)


def worker(
    redis_client: aioredis.Redis, scripts: Scripts, settings: Settings, build: str
) -> LeaseStore:
    store = LeaseStore.for_settings(redis_client, scripts, settings)
    store.build_id = build
    return store


@pytest.fixture
def a(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> LeaseStore:
    """A worker's store on build-a."""
    return worker(redis_client, scripts, settings, "build-a")


@pytest.fixture
def b(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> LeaseStore:
    """A worker's store on build-b."""
    return worker(redis_client, scripts, settings, "build-b")


async def create(run_store: RunStore, **options: object) -> str:
    new = NewRun(handler="demo.echo", input={"n": 1}, **options)  # type: ignore[arg-type]
    return (await run_store.create(new)).run.id


async def claim_one(store: LeaseStore, owner: str, count: int = 10) -> list[Lease]:
    return [run.lease for run in (await store.claim(Q, owner, count)).runs]


async def pinned_and_released(
    run_store: RunStore, a: LeaseStore, **options: object
) -> tuple[str, Lease]:
    """A pinned run claimed by build a, handed back (queued again, in a's lanes)."""
    run_id = await create(run_store, versioning="pinned", **options)
    (lease,) = await claim_one(a, "w-a")
    assert lease.run_id == run_id
    await a.release([lease], "drain")
    return run_id, lease


async def test_a_pinned_run_goes_back_only_to_its_build(
    run_store: RunStore, a: LeaseStore, b: LeaseStore
) -> None:
    run_id, _ = await pinned_and_released(run_store, a)
    run = await run_store.get(run_id)
    assert (run.versioning, run.pinned_build, run.status) == ("pinned", "build-a", RunStatus.QUEUED)
    assert await claim_one(b, "w-b") == []  # another build's claim does not take it
    (again,) = await claim_one(a, "w-a2")
    assert again.run_id == run_id and again.fence == 3


async def test_an_auto_upgrade_run_goes_to_whichever_build_claims_next(
    run_store: RunStore, a: LeaseStore, b: LeaseStore
) -> None:
    run_id = await create(run_store)
    (lease,) = await claim_one(a, "w-a")
    await a.release([lease], "drain")
    (taken,) = await claim_one(b, "w-b")
    run = await run_store.get(run_id)
    assert taken.run_id == run_id
    assert (run.versioning, run.pinned_build, run.build_id) == ("auto_upgrade", None, "build-b")


async def test_upgrade_moves_a_queued_run_to_the_other_build_or_to_none(
    run_store: RunStore, a: LeaseStore, b: LeaseStore, builds: BuildStore
) -> None:
    to_b, _ = await pinned_and_released(run_store, a)
    result = await builds.upgrade(Q, [to_b], to_build="build-b")
    assert result.upgraded == [to_b] and result.refused == {}
    assert await claim_one(a, "w-a") == []
    (taken,) = await claim_one(b, "w-b")
    assert taken.run_id == to_b
    kinds = [event.type for event in await run_store.read_events(to_b)]
    assert kinds.count("upgraded") == 1
    upgraded = next(e for e in await run_store.read_events(to_b) if e.type == "upgraded")
    assert upgraded.data == {"from": "build-a", "to": "build-b"}

    # to none: the next claim, by any build, pins it anew
    await b.release([taken], "drain")
    assert (await builds.upgrade(Q, [to_b])).upgraded == [to_b]
    (again,) = await claim_one(a, "w-a3")
    assert again.run_id == to_b
    assert (await run_store.get(to_b)).pinned_build == "build-a"


async def test_upgrade_refuses_what_it_cannot_move_and_writes_nothing_for_them(
    run_store: RunStore, a: LeaseStore, b: LeaseStore, builds: BuildStore
) -> None:
    pinned, _ = await pinned_and_released(run_store, a)
    plain = await create(run_store)
    (held,) = await claim_one(a, "w-a", 1)  # the pinned one comes first: its build's ring
    assert held.run_id == pinned
    await a.finish_and_claim(Q, "w-a", [Outcome(held, RunStatus.SUCCEEDED, output_json="{}")], 0)
    unknown = f"{Q}.01JDZ000000000000000000009"
    before = {run_id: await run_store.read_events(run_id) for run_id in (pinned, plain)}
    result = await builds.upgrade(Q, [pinned, plain, unknown], to_build="build-b")
    assert result.upgraded == []
    assert result.refused == {pinned: "ended", plain: "not_pinned", unknown: "not_found"}
    after = {run_id: await run_store.read_events(run_id) for run_id in (pinned, plain)}
    assert after == before


async def test_the_pinned_index_counts_open_runs_and_forgets_ended_ones(
    run_store: RunStore, a: LeaseStore, b: LeaseStore, builds: BuildStore
) -> None:
    await pinned_and_released(run_store, a)
    await create(run_store, versioning="pinned")
    leases = await claim_one(a, "w-a")
    assert len(leases) == 2
    counts = PinnedRuns()
    await builds.pinned_runs(Q, "build-a", counts)
    assert (counts.queued, counts.running, counts.parked) == (0, 2, 0)
    ended = [Outcome(lease, RunStatus.SUCCEEDED, output_json="{}") for lease in leases]
    await a.finish_and_claim(Q, "w-a", ended, 0)
    assert await builds.pinned_builds(Q) == set()
    empty = PinnedRuns()
    await builds.pinned_runs(Q, "build-a", empty)
    assert empty.total == 0


async def test_a_build_nobody_runs_is_said_once_per_run_and_cleared_by_its_claim(
    run_store: RunStore, a: LeaseStore, b: LeaseStore, builds: BuildStore
) -> None:
    run_id, _ = await pinned_and_released(run_store, a)
    assert await builds.note_unavailable(Q, ["build-a"]) == {}  # its build is live
    assert await builds.note_unavailable(Q, ["build-b"]) == {"build-a": 1}
    assert await builds.note_unavailable(Q, ["build-b"]) == {"build-a": 1}
    waits = [e for e in await run_store.read_events(run_id) if e.type == "wait"]
    assert [w.data for w in waits] == [
        {
            "kind": "build_unavailable",
            "resource": "build",
            "subject": "build-a",
            "build_id": "build-a",
        }
    ]
    assert (await run_store.get(run_id)).blocked_on == "b:build-a"
    assert await builds.waiting_on(Q, "build-a") == 1
    (lease,) = await claim_one(a, "w-a2")  # the build came back
    assert lease.run_id == run_id
    assert (await run_store.get(run_id)).blocked_on is None
