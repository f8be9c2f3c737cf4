"""The hand-off inbox: a run a create claimed on this worker's behalf, taken at once.

A worker whose claim found its queue empty registers for a hand-off (claim_runs,
``LEASEHOLD_HANDOFF``); the next create of that queue claims a run for it through
claim_runs' own serving code and pushes the claim's row to this worker's inbox list
(``scripts/lua/includes/claim.lua``). Waiting on that list with a blocking read
takes two process wake-ups off the path from a create to its run's start (the
wake message and the claim's round trip): the run is already leased when the row
arrives, so it goes straight into the code that starts a claimed run.

**A reply lost on the way.** ``BLMOVE`` moves the row from the inbox into this
worker's ``taken`` list in the same step that answers it; the row leaves ``taken``
only once its run was started here. After a failed read (a connection cut
mid-reply, which redis-py may also have resent on its own) and after every idle
timeout, ``taken`` is read again and what is there is started, so a row whose
reply was lost still reaches its worker well within its lease. Rows started but
not yet removed from ``taken`` are remembered, so none starts twice.

**A row read late.** A worker paused (SIGSTOP, a long GC, a starved VM) while its
read was waiting gets the reply only when it runs again, possibly after its run's
lease expired and the reconciler gave the run to another worker. Fencing would
reject its writes, but the handler would still run (and its side effects). So a
row read more than ``stale_after_s`` after its read was sent (by the monotonic
clock: an upper bound of the row's age, see ``_read_at``) starts only once a
renewal of its lease answered that this worker still holds it; LOST drops it
unstarted. A row read in time costs nothing more: the read's timeout is far below
``stale_after_s``, so only a pause (or a failed read's backoff) pays the round trip.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import cast

from redis.exceptions import RedisError

from app.retry import REDIS_BACKOFF
from app.store.keys import QueueKeys
from app.store.redis.connection import AsyncRedis
from app.store.redis.refusals import describe, refusal_of
from app.telemetry.metrics import WORKER_WRITES_REFUSED

log = logging.getLogger(__name__)


class HandoffInbox:
    """One blocking read at a time on one queue's inbox of this worker."""

    def __init__(
        self,
        client: AsyncRedis,
        *,
        keys: QueueKeys,
        owner_id: str,
        timeout_s: float,
        on_row: Callable[[str, float], None],
        on_idle: Callable[[], None],
        stale_after_s: float,
        confirm: Callable[[str], Awaitable[bool]],
    ) -> None:
        self._client = client
        self._inbox = keys.handoff_inbox(owner_id)
        self._taken = keys.handoff_taken(owner_id)
        self._timeout_s = timeout_s
        self._on_row = on_row
        self._on_idle = on_idle
        self._stale_after_s = stale_after_s
        self._confirm = confirm
        # rows handed to on_row whose LREM from `taken` has not been answered yet
        self._started: set[str] = set()
        # when the last read was sent (monotonic): a row it moved was pushed after, or
        # was waiting already (then at most a round trip before)
        self._read_at = time.monotonic()

    async def run_forever(self) -> None:
        """Take rows until cancelled; after a failure, back off and read ``taken`` again.

        A failure here costs nothing but time: the rows stay in Redis (inbox or
        taken) and the worker's own claims keep running meanwhile.
        """
        failures = REDIS_BACKOFF.streak()
        while True:
            try:
                await self._recover()
                while True:
                    self._read_at = time.monotonic()
                    # the client decodes replies: a row is a str
                    raw = cast(
                        str | None,
                        await self._client.blmove(
                            self._inbox,
                            self._taken,
                            self._timeout_s,  # type: ignore[arg-type]  # Redis takes seconds as a float
                            "LEFT",
                            "RIGHT",
                        ),
                    )
                    # reset once the read is answered, not after _recover: at maxmemory
                    # LRANGE passes and BLMOVE is refused, and the streak never grew
                    failures.reset()
                    if raw is None:
                        self._on_idle()
                        await self._recover()
                        continue
                    await self._take(raw)
            except (RedisError, OSError) as exc:
                WORKER_WRITES_REFUSED.labels("handoff", refusal_of(exc) or "error").inc()
                await failures.wait(exc, what="hand-off inbox", why=describe(exc), logger=log)

    async def _take(self, raw: str) -> None:
        """Start one row's run (unless it was started already, or its lease is found lost),
        then drop it from ``taken``. Raises RedisError/OSError: the row stays in ``taken``."""
        if raw not in self._started:
            read_at = self._read_at
            if time.monotonic() - read_at > self._stale_after_s:
                read_at = time.monotonic()  # the renewal's send time confirms the lease
                if not await self._confirm(raw):
                    await self._client.lrem(self._taken, 1, raw)
                    return
            self._started.add(raw)
            self._on_row(raw, read_at)
            # the run's task takes its first step (to its handler's first await) before
            # the LREM is built and sent: ~300 µs of redis-py off the path to the start
            await asyncio.sleep(0)
        await self._client.lrem(self._taken, 1, raw)
        self._started.discard(raw)

    async def _recover(self) -> None:
        """Start the rows taken whose reply never came (a cut connection, a resend): the
        read that moved one was sent at or after the last ``_read_at``."""
        for raw in cast(list[str], await self._client.lrange(self._taken, 0, -1)):
            await self._take(raw)
