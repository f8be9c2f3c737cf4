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

from prometheus_client import Gauge

from app.errors import CapacityExceeded
from app.telemetry.metrics import SSE_REFUSED, SSE_STREAMS, TREE_STREAMS

# what a refused follower is told to wait: long enough for a flood to thin out
RETRY_AFTER_S = 2


def refuse(cap: str, *, what: str, limit: int, setting: str) -> CapacityExceeded:
    """Count a refusal at ``cap`` and build the error the API answers with 503."""
    SSE_REFUSED.labels(cap).inc()
    return CapacityExceeded(what, limit, setting)


class StreamSlots:
    """At most ``limit`` SSE responses at once in this process (``cap`` names the bound).

    ``within``: the slots these are a part of, taken and given back together (a tree
    stream is one of the process's event streams, and one of its tree streams).
    """

    def __init__(
        self,
        limit: int,
        *,
        cap: str = "followers",
        what: str = "event streams",
        setting: str = "LEASEHOLD_SSE_MAX_FOLLOWERS",
        gauge: Gauge = SSE_STREAMS,
        within: StreamSlots | None = None,
    ) -> None:
        self.limit = limit
        self.taken = 0
        self._cap, self._what, self._setting = cap, what, setting
        self._gauge = gauge
        self._within = within

    @classmethod
    def for_trees(cls, limit: int, *, within: StreamSlots) -> StreamSlots:
        """The tree streams' slots (LEASEHOLD_SSE_MAX_TREE_STREAMS), each one of ``within``'s."""
        return cls(
            limit,
            cap="trees",
            what="tree streams",
            setting="LEASEHOLD_SSE_MAX_TREE_STREAMS",
            gauge=TREE_STREAMS,
            within=within,
        )

    def take(self) -> None:
        """Take a slot (and one of ``within``'s); raises :class:`CapacityExceeded` when full."""
        if self.taken >= self.limit:
            raise refuse(self._cap, what=self._what, limit=self.limit, setting=self._setting)
        if self._within is not None:
            self._within.take()
        self.taken += 1
        self._gauge.inc()

    def give_back(self) -> None:
        """Return a slot taken by :meth:`take`."""
        self.taken -= 1
        self._gauge.dec()
        if self._within is not None:
            self._within.give_back()
