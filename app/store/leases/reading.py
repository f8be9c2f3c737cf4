"""Who holds a run's lease now, at which fence, until when: one read, by the Redis clock.

The one reading of a lease from outside its owner's writes: ``GET /leases/{run_id}``
answers it (a gate's online check), and ``ctx.lease_token`` reads it for the token's
expiry. A read is a snapshot: the fence may move the instant after, which is why a
verifier refuses a token whose fence is not the one read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.store.keys import QueueKeys, queue_of_run
from app.store.redis.connection import AsyncRedis

# a run in one of these holds a lease while its expiry is ahead (Redis clock)
LEASED_STATUSES = frozenset({"running", "cancelling"})


@dataclass(frozen=True)
class LeaseRecord:
    """A run's lease as Redis holds it at ``now_ms``."""

    run_id: str
    queue: str
    status: str
    owner_id: str | None
    fence: int
    expires_at_ms: int | None
    now_ms: int

    @property
    def held(self) -> bool:
        """Whether an owner holds the run now: leased status and an expiry still ahead."""
        return (
            self.status in LEASED_STATUSES
            and self.owner_id is not None
            and self.expires_at_ms is not None
            and self.expires_at_ms > self.now_ms
        )


async def read_lease(client: AsyncRedis, *, prefix: str, run_id: str) -> LeaseRecord | None:
    """The run's lease with the Redis clock's now, or None for no such run.

    Raises :class:`~app.errors.RunNotFound` for a malformed id.
    """
    queue = queue_of_run(run_id)
    key = QueueKeys(prefix, queue).run(run_id)
    async with client.pipeline(transaction=False) as pipe:
        pipe.hmget(key, "status", "owner_id", "fence", "lease_expires_at")
        pipe.time()
        (status, owner, fence, expires), (seconds, micros) = await pipe.execute()
    if status is None:
        return None
    return LeaseRecord(
        run_id=run_id,
        queue=queue,
        status=_text(status),
        owner_id=_text(owner) or None,
        fence=int(fence or 0),
        expires_at_ms=int(float(expires)) if expires else None,
        now_ms=int(seconds) * 1000 + int(micros) // 1000,
    )


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return value or ""
