"""The rate-limit promise under faults: a key's grants never pass limit + burst per period.

``chaos.quota`` runs (:mod:`tools.chaos.handlers`) take tokens of one declared key with
``ctx.rate_limit`` and append each grant's time (``Grant.until_ms``, the Redis clock's
acquisition time the bucket counted) to ``$CHAOS_SIDE_DIR/<run id>.grants``, a file
the harness owns. Kills, pauses, partitions and Redis restarts may lose a grant a
handler never got to write down (fewer counted: never a false alarm) or spend a
reserved token nobody used (under-admission), but never let more through:

* ``rate_exceeded`` (:func:`tools.chaos.promises.check_rate_limit`): some window of
  one period holds more grants of the key than limit + burst.

The key is low (5 per second, burst 2) so that the workload's quota runs, a few a
second, press against it.
"""

from __future__ import annotations

from pathlib import Path

from app.models.read import RateLimitSpec
from app.store.lua.scripts import Scripts
from app.store.ratelimits.store import RateLimitStore
from app.store.redis.connection import AsyncRedis

QUOTA_KEY = "chaos.upstream"
QUOTA_SPEC = RateLimitSpec(limit=5, period_s=1.0, burst=2)


def grants_file(side_dir: Path, run_id: str) -> Path:
    """Where one run's grant times (epoch ms, Redis clock) are appended."""
    return side_dir / f"{run_id}.grants"


def read_grants(side_dir: Path) -> list[int]:
    """Every grant every run wrote down (lines cut short by a kill are skipped)."""
    grants = []
    for path in side_dir.glob("*.grants"):
        for line in path.read_text().splitlines():
            if line.strip().isdigit():
                grants.append(int(line))
    return grants


async def declare(client: AsyncRedis, prefix: str) -> None:
    """Declare the quota key before the workload starts (as an operator would)."""
    store = RateLimitStore(client, scripts=Scripts(), prefix=prefix, max_keys=1000)
    await store.declare(QUOTA_KEY, QUOTA_SPEC)


def worst_window(times_ms: list[int], window_ms: int) -> tuple[int, int]:
    """The most grants inside any closed window of ``window_ms``, and where it starts."""
    ordered, most, at, start = sorted(times_ms), 0, 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] > window_ms:
            start += 1
        if end - start + 1 > most:
            most, at = end - start + 1, ordered[start]
    return most, at
