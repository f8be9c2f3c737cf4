"""Per-process caps on event streams: how many SSE responses, runs and queues at once.

A stream holds a socket, a task and an inbox for as long as the client stays, so
one careless client opening hundreds of them could starve everyone else. Each
SSE response takes a slot of :class:`StreamSlots` before its 200 is sent, and
gives it back when the response ends, however it ends (the slot is tied to the
response object, :class:`~app.api.eventstream.EventStream`, not to the
generator: a generator that never started would never run its ``finally``).
Past a cap the request gets 503 problem+json with ``Retry-After`` and nothing
is opened.
"""

from __future__ import annotations

from app.errors import CapacityExceeded
from app.telemetry.metrics import SSE_REFUSED, SSE_STREAMS

# what a refused follower is told to wait: long enough for a flood to thin out
RETRY_AFTER_S = 2


def refuse(cap: str, *, what: str, limit: int, setting: str) -> CapacityExceeded:
    """Count a refusal at ``cap`` and build the error the API answers with 503."""
    SSE_REFUSED.labels(cap).inc()
    return CapacityExceeded(what, limit, setting)


class StreamSlots:
    """At most ``limit`` SSE responses at once in this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0

    def take(self) -> None:
        """Take a slot; raises :class:`CapacityExceeded` when all are taken."""
        if self.taken >= self.limit:
            raise refuse(
                "followers",
                what="event streams",
                limit=self.limit,
                setting="LEASEHOLD_SSE_MAX_FOLLOWERS",
            )
        self.taken += 1
        SSE_STREAMS.inc()

    def give_back(self) -> None:
        """Return a slot taken by :meth:`take`."""
        self.taken -= 1
        SSE_STREAMS.dec()
