"""Per-process caps on event streams: how many SSE responses, runs and queues at once.

A stream holds a socket, a task and an inbox for as long as the client stays, so
one careless client opening hundreds of them could starve everyone else. Each
SSE response takes a slot of :class:`StreamSlots` before its 200 is sent, and
gives it back when the response ends, however it ends (the slot is tied to the
response object, not to the generator: a generator that never started would
never run its ``finally``). Past a cap the request gets 503 problem+json with
``Retry-After`` and nothing is opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from app.errors import CapacityExceeded
from app.metrics import SSE_REFUSED, SSE_STREAMS

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


class SlottedEventSourceResponse(EventSourceResponse):
    """An SSE response that gives back the slot its route took once it has been sent, or not.

    Build it right after :meth:`StreamSlots.take`, with nothing that can raise
    in between.
    """

    def __init__(self, content: AsyncIterator[Any], *, slots: StreamSlots, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._slots: StreamSlots | None = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the stream; the slot is given back when it ends, for any reason."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._slots is not None:
                self._slots.give_back()
                self._slots = None
