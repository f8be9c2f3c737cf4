"""``ctx.lease_token``: a signed statement of the lease a handler holds, for outside calls.

A tool behind ``leasehold gate`` (or any service using :mod:`app.tokens.verify`) can
then refuse a caller whose lease was taken over: the token names the run, namespace,
queue, owner, fence and claim, and expires with the lease (Redis clock), never later than
LEASEHOLD_LEASE_TOKEN_MAX_S after it was made. A renewal moves the lease's expiry, not
an issued token's: ask again (once per outside call, or keep one until near its
``exp``). The token is signed by the one signing room (:mod:`app.store.signing.store`).
"""

from __future__ import annotations

from app.errors import LeaseLost
from app.store.leases.reading import read_lease
from app.store.leases.store import Lease
from app.store.redis.connection import AsyncRedis
from app.store.signing.store import SigningKeys


class LeaseTokens:
    """One run's lease tokens: read the lease (one round trip), sign its claims."""

    def __init__(
        self,
        signing: SigningKeys,
        lease: Lease,
        *,
        client: AsyncRedis,
        prefix: str,
        namespace: str,
        max_lifetime_ms: int,
    ) -> None:
        self.signing = signing
        self.lease = lease
        self.client = client
        self.prefix = prefix
        self.namespace = namespace
        self.max_lifetime_ms = max_lifetime_ms

    async def issue(self, audience: str) -> str:
        """A token for ``audience`` expiring with the lease as Redis holds it now.

        Raises :class:`~app.errors.LeaseLost` when this owner no longer holds the run at
        its fence (taken over, or its lease ran out): it must not call anything.
        """
        if not audience:
            raise ValueError("a lease token needs an audience (what it is for)")
        lease = self.lease
        now = await read_lease(self.client, prefix=self.prefix, run_id=lease.run_id)
        if (
            now is None
            or not now.held
            or now.owner_id != lease.owner_id
            or now.fence != lease.fence
            or now.expires_at_ms is None
        ):
            raise LeaseLost(lease.run_id, lease.fence)
        expires_ms = min(now.expires_at_ms, now.now_ms + self.max_lifetime_ms)
        claims: dict[str, object] = {
            "sub": lease.run_id,
            "aud": audience,
            "iat": now.now_ms // 1000,
            # JWT times are whole seconds: round down, never past the lease
            "exp": expires_ms // 1000,
            "ns": self.namespace,
            "queue": lease.queue,
            "owner": lease.owner_id,
            "fence": lease.fence,
            # this claim's identity: the fence moves on every claim, so it is never reused
            "claim": f"{lease.owner_id}/{lease.fence}",
        }
        return await self.signing.sign(claims)
