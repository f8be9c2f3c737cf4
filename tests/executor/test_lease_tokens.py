"""``ctx.lease_token`` in-process, on a real Redis: claims, expiry, refusal once lost."""

from __future__ import annotations

from collections.abc import Callable

import jwt
import pytest
import redis.asyncio as aioredis

from app.errors import LeaseLost
from app.executor.lease_tokens import LeaseTokens
from app.store.leases.reading import read_lease
from app.store.leases.store import ClaimedRun, LeaseStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.signing.store import SigningKeys
from app.tokens.verify import LeaseVerifier, TokenRefused


@pytest.fixture
def signing(redis_client: aioredis.Redis, prefix: str) -> SigningKeys:
    return SigningKeys(redis_client, prefix=prefix, rotate_ms=86_400_000, max_token_ms=3_600_000)


@pytest.fixture
async def run(run_store: RunStore, lease_store: LeaseStore) -> ClaimedRun:
    """The test's run, claimed by ``w-a``."""
    await run_store.create(NewRun(handler="demo.echo", input={}))
    return (await lease_store.claim("default", "w-a", 1)).runs[0]


@pytest.fixture
def tokens_for(
    signing: SigningKeys, redis_client: aioredis.Redis, prefix: str
) -> Callable[[ClaimedRun], LeaseTokens]:
    def build(claimed: ClaimedRun) -> LeaseTokens:
        return LeaseTokens(
            signing,
            claimed.lease,
            client=redis_client,
            prefix=prefix,
            namespace="default",
            max_lifetime_ms=3_600_000,
        )

    return build


async def test_a_lease_token_states_the_lease_and_expires_with_it(
    run: ClaimedRun,
    tokens_for: Callable[[ClaimedRun], LeaseTokens],
    signing: SigningKeys,
    redis_client: aioredis.Redis,
    prefix: str,
) -> None:
    token = await tokens_for(run).issue("tools")
    verifier = LeaseVerifier(audience="tools", jwks=await signing.public_keys(), online=False)
    claims = verifier.verify(token)
    assert (claims.run_id, claims.queue, claims.owner_id, claims.fence) == (
        run.id,
        "default",
        "w-a",
        run.fence,
    )
    # its namespace, and this claim's identity (the fence moves on every claim)
    assert (claims.namespace, claims.claim_id) == ("default", f"w-a/{run.fence}")
    lease = await read_lease(redis_client, prefix=prefix, run_id=run.id)
    assert lease is not None and lease.expires_at_ms is not None
    assert claims.expires_at == lease.expires_at_ms // 1000, "exp is the lease's expiry"
    with pytest.raises(TokenRefused):
        LeaseVerifier(audience="other", jwks=await signing.public_keys(), online=False).verify(
            token
        )


async def test_a_lost_lease_gets_no_token(
    run: ClaimedRun, lease_store: LeaseStore, tokens_for: Callable[[ClaimedRun], LeaseTokens]
) -> None:
    tokens = tokens_for(run)
    await lease_store.release([run.lease], "drain")
    retaken = (await lease_store.claim("default", "w-b", 1)).runs[0]
    assert retaken.fence > run.fence
    with pytest.raises(LeaseLost):
        await tokens.issue("tools")
    fresh = await tokens_for(retaken).issue("tools")
    assert jwt.decode(fresh, options={"verify_signature": False})["owner"] == "w-b"


async def test_a_token_needs_an_audience(
    run: ClaimedRun, tokens_for: Callable[[ClaimedRun], LeaseTokens]
) -> None:
    with pytest.raises(ValueError, match="audience"):
        await tokens_for(run).issue("")
