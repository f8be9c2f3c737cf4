"""What ``ctx.rate_limit`` and ``ctx.rate_limited`` do inside a run.

A take reserves its tokens in the shared bucket (``take_tokens``): N handlers
waiting on one key get N staggered times, not a herd. A short wait is slept here,
the run's lease renewing on the heartbeat thread as always, after a ``wait`` event
that names the key and when the token is due (``kind: rate_limited``). A token
further away than LEASEHOLD_RATE_LIMIT_MAX_WAIT_S is not reserved: the handler
raises :class:`~app.errors.RateLimitRelease` and the worker releases the run until
then (fence+1, no attempt spent), so a long wait holds no lease and no slot.

An upstream 429 (``ctx.rate_limited``) pushes the key's bucket forward for every
worker (``push_bucket``), and by default releases the run until the bucket lets
tokens pass again.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRateLimitUse, RateLimitRelease
from app.store.ratelimits.store import Declared, RateLimitStore, Token
from app.telemetry.metrics import RATE_LIMIT_PUSHES, RATE_LIMIT_WAIT_SECONDS, RATE_LIMIT_WAITS

Emit = Callable[[str, Any], Awaitable[None]]
# Retry-After one 429 may report: a day (a longer one is a misconfigured upstream)
MAX_RETRY_AFTER_S = 86_400.0


@dataclass(frozen=True)
class Grant:
    """Tokens a handler was granted: the key, and when (Redis clock, epoch ms) they were due.

    ``until_ms`` is the acquisition time the bucket counted: over any window of one
    period at most limit + burst grants of a key fall in it.
    """

    key: str
    until_ms: int
    waited_ms: int


class RateLimiter:
    """One run's access to the shared rate-limit buckets."""

    def __init__(self, store: RateLimitStore, *, emit: Emit, max_wait_ms: int) -> None:
        self._store = store
        self._emit = emit
        self.max_wait_ms = max_wait_ms

    async def acquire(self, key: str, cost: int = 1) -> Grant:
        """Take ``cost`` tokens of ``key``, waiting (visibly, lease held) until they are due.

        Raises :class:`~app.errors.RateLimitNotDeclared` for an undeclared key,
        :class:`InvalidRateLimitUse` for a cost above the key's burst, and
        :class:`~app.errors.RateLimitRelease` when the token is further away than the
        longest wait (let it propagate: the run is released until then).
        """
        declared = await self._store.resolve(key)
        if not 1 <= cost <= declared.spec.burst:
            raise InvalidRateLimitUse(
                f"cost {cost} for rate-limit key {key!r}: it must be 1..{declared.spec.burst} "
                "(its burst; a larger cost could never pass)"
            )
        token = await self._store.take(declared, cost=cost, max_wait_ms=self.max_wait_ms)
        if not token.granted:
            await self._release(declared, token, reason="max_wait")
        if token.wait_ms > 0:
            await self._emit("wait", _wait_data(declared, token))
            RATE_LIMIT_WAITS.labels(declared.name, "waited").inc()
            RATE_LIMIT_WAIT_SECONDS.labels(declared.name).inc(token.wait_ms / 1000)
            await asyncio.sleep(token.wait_ms / 1000)
        return Grant(declared.key, token.until_ms, token.wait_ms)

    async def report_429(self, key: str, *, retry_after_s: float, release: bool) -> int:
        """Push ``key``'s bucket ``retry_after_s`` ahead for everyone; the ms it frees again.

        With ``release`` raises :class:`~app.errors.RateLimitRelease` (the run is
        released until then, no attempt spent); otherwise returns the epoch ms (Redis
        clock) at which a token passes again.
        """
        if not math.isfinite(retry_after_s) or not 0 <= retry_after_s <= MAX_RETRY_AFTER_S:
            raise InvalidRateLimitUse(
                f"retry_after_s={retry_after_s!r}: it must be 0..{MAX_RETRY_AFTER_S:g} seconds"
            )
        declared = await self._store.resolve(key)
        token = await self._store.push(declared, retry_after_ms=math.ceil(retry_after_s * 1000))
        RATE_LIMIT_PUSHES.labels(declared.name).inc()
        if release:
            await self._release(declared, token, reason="upstream_429")
        return token.until_ms

    async def _release(self, declared: Declared, token: Token, *, reason: str) -> None:
        data = {**_wait_data(declared, token), "released": True, "reason": reason}
        await self._emit("wait", data)
        RATE_LIMIT_WAITS.labels(declared.name, "released").inc()
        raise RateLimitRelease(declared.key, max(1, token.wait_ms), reason)


def _wait_data(declared: Declared, token: Token) -> dict[str, Any]:
    return {
        "kind": "rate_limited",
        "key": declared.key,
        "declared": declared.name,
        "until_ms": token.until_ms,
        "wait_ms": token.wait_ms,
    }
