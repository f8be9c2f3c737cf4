"""What a claim reads of a run, and what a finish expires, on a real Redis.

The claim reads a run's state, resume_input and previous claim only when something has
moved its fence (or it is a re-run): a record nobody claimed yet cannot have them. These
tests hold the records that can — including a re-run written at fence 0, as retry_run
wrote it before 7912d97 — to getting every field as before. A finish expires a run's
effects and waits hashes only when one of them exists (one EXISTS before the PEXPIREs).
"""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.store.leases.store import LeaseStore, Outcome
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

OWNER = "w-1"


async def created(run_store: RunStore, **fields: object) -> str:
    """A queued demo.echo run's id."""
    result = await run_store.create(NewRun(handler="demo.echo", input={}, **fields))  # type: ignore[arg-type]
    return result.run.id


async def test_a_fresh_run_is_claimed_without_state_and_stamped_as_a_first_claim(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    run_id = await created(run_store)
    run_key = lease_store.keys("default").run(run_id)
    assert await redis_client.hget(run_key, "fence") == "0"
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert (claimed.state, claimed.resume_input) == (None, None)
    assert (claimed.prior_fence, claimed.prior_owner) == (None, None)
    record = await redis_client.hgetall(run_key)
    assert record["first_started_at"] == record["started_at"]
    assert record["attempt_claim"] == f"1 {OWNER}"


async def test_a_re_run_written_at_fence_0_with_a_state_still_gets_its_state(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """retry_run between 2cd6a1d and 7912d97 copied a checkpoint into a new record at
    fence 0: its retry_of field is what makes the claim read the state anyway."""
    run_id = await created(run_store)
    run_key = lease_store.keys("default").run(run_id)
    await redis_client.hset(
        run_key, mapping={"state": json.dumps({"step": 2}), "retry_of": "default.old"}
    )
    assert await redis_client.hget(run_key, "fence") == "0"
    claimed = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert claimed.state == {"step": 2}


async def test_a_run_claimed_before_gets_its_state_resume_input_and_previous_claim(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    """A run whose fence moved (claimed, then back in its queue) is read whole, whichever
    of the later fields it has."""
    run_id = await created(run_store, max_attempts=2)
    first = (await lease_store.claim("default", OWNER, 1)).runs[0]
    run_key = lease_store.keys("default").run(run_id)
    await redis_client.hset(
        run_key, mapping={"state": json.dumps({"step": 5}), "resume_input": json.dumps("yes")}
    )
    retry = Outcome(
        first.lease, RunStatus.FAILED, error_json='{"code":"x","message":"m"}', retry_delay_ms=0
    )
    await lease_store.finish_and_claim("default", OWNER, [retry], 0)
    second = (await lease_store.claim("default", "w-2", 1)).runs[0]
    assert second.id == run_id
    assert (second.state, second.resume_input) == ({"step": 5}, "yes")
    assert (second.prior_fence, second.prior_owner) == (first.fence, OWNER)
    assert await redis_client.hget(run_key, "attempt_claim") == f"{second.fence} w-2"


async def test_a_second_claim_keeps_the_first_claims_start_time(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    run_id = await created(run_store, max_attempts=2)
    run_key = lease_store.keys("default").run(run_id)
    first = (await lease_store.claim("default", OWNER, 1)).runs[0]
    first_started = await redis_client.hget(run_key, "first_started_at")
    await redis_client.hset(run_key, "first_started_at", "12345")  # told apart from any now
    retry = Outcome(
        first.lease, RunStatus.FAILED, error_json='{"code":"x","message":"m"}', retry_delay_ms=0
    )
    await lease_store.finish_and_claim("default", OWNER, [retry], 0)
    assert (await lease_store.claim("default", OWNER, 1)).runs[0].id == run_id
    assert first_started is not None
    assert await redis_client.hget(run_key, "first_started_at") == "12345"


async def finished(lease_store: LeaseStore, run_id: str) -> None:
    """Claim the run and finish it succeeded."""
    run = (await lease_store.claim("default", OWNER, 1)).runs[0]
    assert run.id == run_id
    await lease_store.finish_and_claim(
        "default", OWNER, [Outcome(run.lease, RunStatus.SUCCEEDED)], 0
    )


@pytest.mark.parametrize("kept, absent", [("waits", "effects"), ("effects", "waits")])
async def test_a_finish_expires_either_hash_when_the_other_does_not_exist(
    run_store: RunStore,
    lease_store: LeaseStore,
    redis_client: aioredis.Redis,
    kept: str,
    absent: str,
) -> None:
    run_id = await created(run_store)
    keys = lease_store.keys("default")
    key_of = {"waits": keys.waits, "effects": keys.effects}
    await redis_client.hset(key_of[kept](run_id), "step:1", "{}")
    await finished(lease_store, run_id)
    assert await redis_client.pttl(key_of[kept](run_id)) > 0
    assert await redis_client.exists(key_of[absent](run_id)) == 0


async def test_a_plain_runs_finish_creates_neither_hash(
    run_store: RunStore, lease_store: LeaseStore, redis_client: aioredis.Redis
) -> None:
    run_id = await created(run_store)
    keys = lease_store.keys("default")
    await finished(lease_store, run_id)
    assert await redis_client.pttl(keys.run(run_id)) > 0
    assert await redis_client.exists(keys.effects(run_id), keys.waits(run_id)) == 0
