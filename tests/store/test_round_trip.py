"""A worker's round trip (outcomes written and runs claimed in one write), on a real Redis.

Its calls go on one pooled connection, not through redis-py's pipeline (issue 19
aim 1): what the pipeline did for them must still hold. A script Redis lacks is run
from its source, an error reply stays in its call's place while the others run, and a
connection cut between trips is reconnected without the caller seeing it.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from app.models import RunStatus
from app.store.leases.bindings import CLAIM_RUNS, ClaimArgs
from app.store.leases.store import LeaseStore, Outcome
from app.store.lua.scripts import Scripts
from app.store.lua.transition import LeaseAnswer
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

OWNER = "w-trip"


async def created(run_store: RunStore, n: int) -> set[str]:
    return {
        (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id for _ in range(n)
    }


async def statuses(run_store: RunStore, ids: set[str]) -> set[str]:
    return {(await run_store.get(run_id)).status for run_id in ids}


async def test_a_trip_finishes_and_claims_after_redis_lost_its_scripts(
    redis_client: aioredis.Redis, run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = await created(run_store, 4)
    _, first = await lease_store.finish_and_claim("default", OWNER, [], 2)
    await redis_client.script_flush()  # a restart or a failover to a node that never loaded them

    outcomes = [Outcome(run.lease, RunStatus.SUCCEEDED, output_json="{}") for run in first.runs]
    codes, second = await lease_store.finish_and_claim("default", OWNER, outcomes, 2)

    assert codes == [LeaseAnswer.OK, LeaseAnswer.OK]
    assert {run.id for run in first.runs + second.runs} == ids
    assert await statuses(run_store, {run.id for run in first.runs}) == {"succeeded"}
    assert await statuses(run_store, {run.id for run in second.runs}) == {"running"}


async def test_an_error_reply_stays_in_its_calls_place_and_the_others_run(
    redis_client: aioredis.Redis, scripts: Scripts, run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = await created(run_store, 1)
    keys = lease_store.keys("default")
    refused = CLAIM_RUNS.call(keys, ClaimArgs(OWNER, -5, 1000, 100, 10, "t1"))  # a bad count
    fine = CLAIM_RUNS.call(keys, ClaimArgs(OWNER, 1, 1000, 100, 10, "t2"))

    results = await scripts.pipeline(redis_client, [refused, fine], raise_on_error=False)

    assert isinstance(results[0], ResponseError)
    assert [row[0] for row in CLAIM_RUNS.decode(results[1]).rows] == sorted(ids)
    assert await statuses(run_store, ids) == {"running"}


async def test_a_trip_on_a_connection_redis_closed_is_sent_again(
    redis_client: aioredis.Redis, redis_url: str, run_store: RunStore, lease_store: LeaseStore
) -> None:
    ids = await created(run_store, 2)
    _, first = await lease_store.finish_and_claim("default", OWNER, [], 1)
    # every connection of the session's server but the killer's own: the worker's pooled
    # one now reads EOF at its next use
    killer = aioredis.Redis.from_url(redis_url)
    try:
        assert await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    finally:
        await killer.aclose()

    outcomes = [Outcome(first.runs[0].lease, RunStatus.SUCCEEDED, output_json="{}")]
    codes, second = await lease_store.finish_and_claim("default", OWNER, outcomes, 1)

    assert codes == [LeaseAnswer.OK]
    assert {first.runs[0].id, second.runs[0].id} == ids
    assert await statuses(run_store, {first.runs[0].id}) == {"succeeded"}
