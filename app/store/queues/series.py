"""Per-queue outcome counters by minute: what the console's queue charts draw.

``finalize`` in finalize.lua counts every terminal write by status, and
``reconcile_expired`` every expired lease it acts on (but a hand-off it gives back
unread: no worker held that lease), in the queue's hash of the
current epoch minute (``QueueKeys.series``). A bucket expires 61 minutes after its
first count, so a queue holds at most ~61 small hashes however busy it is, and
nothing on the hot path reads them. Reading the last hour is one pipelined round
trip of at most ``SERIES_MINUTES`` HGETALLs, all in the queue's slot.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.models.read import QueueSeries, SeriesBucket
from app.store.keys import QueueKeys
from app.store.redis.connection import AsyncRedis

# the window the buckets cover (finalize.lua's SERIES_KEEP_MS keeps one minute more)
SERIES_MINUTES = 60
BUCKET_S = 60
KINDS = ("succeeded", "failed", "cancelled", "orphaned", "expired", "lease_expired")


async def read_series(client: AsyncRedis, keys: QueueKeys, minutes: int) -> QueueSeries:
    """The last ``minutes`` buckets (1..SERIES_MINUTES), oldest first, by the Redis clock.

    The current minute is the last bucket and still counting. Minutes with no
    outcome are zeros, so the answer always has ``minutes`` buckets.
    """
    if not 1 <= minutes <= SERIES_MINUTES:
        raise ValueError(f"minutes must be 1..{SERIES_MINUTES}")
    # not in the pipeline: TIME has no key, and a cluster pipeline refuses it
    seconds, _ = await client.time()
    current = int(seconds) // BUCKET_S
    first = current - minutes + 1
    pipe = client.pipeline(transaction=False)
    for minute in range(first, current + 1):
        pipe.hgetall(keys.series(minute))
    replies: list[dict[str, str]] = await pipe.execute()
    buckets = [
        SeriesBucket(
            start=datetime.fromtimestamp(minute * BUCKET_S, tz=UTC),
            **{kind: int(counts.get(kind, 0)) for kind in KINDS},
        )
        for minute, counts in zip(range(first, current + 1), replies, strict=True)
    ]
    return QueueSeries(queue=keys.queue, bucket_s=BUCKET_S, buckets=buckets)
