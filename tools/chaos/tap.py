"""A tap on the queue's activity stream: what happened to runs that are deleted by the end.

The purge/delete workload removes finished runs from Redis, record and stream
alike, so the checker cannot read their histories at the end. The Lua
transitions also add one entry per lifecycle event (created, claimed, ...,
the terminal one) to the queue's capped activity stream, in the same script as
the change (``emit`` in ``scripts/lua/includes/events.lua``); deleting a run adds
none. The harness reads that stream straight from Redis as it grows and keeps
every entry, so for each deleted run it knows whether, and when, it had ended
before the delete answered, and whether anything was written for it after.

The stream is trimmed to about a thousand entries: a tap that fell further
behind than that (a long stall of the harness itself) counts a gap, and the
checker then does not blame a run for entries the tap never saw.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.store.keys import QueueKeys

POLL_S = 0.2
BATCH = 500


@dataclass(frozen=True)
class Entry:
    """One activity entry: when (Redis clock ms, from its id), what, the status then, fence."""

    ms: int
    type: str
    status: str
    fence: int


@dataclass
class ActivityTap:
    """Every activity entry of one queue, by run id, read as the stream grows."""

    redis: aioredis.Redis
    prefix: str
    queue: str
    by_run: dict[str, list[Entry]] = field(default_factory=dict)
    last_id: str = "0-0"
    entries: int = 0
    gaps: int = 0

    @property
    def key(self) -> str:
        """The activity stream's key."""
        return QueueKeys(self.prefix, self.queue).activity

    async def follow(self, stop: asyncio.Event) -> None:
        """Read new entries every :data:`POLL_S` until ``stop``; Redis faults are waited out."""
        while not stop.is_set():
            # Redis restarting or away: the entries wait in its AOF
            with contextlib.suppress(RedisError, OSError):
                await self.read_new()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=POLL_S)

    async def read_new(self) -> None:
        """Read every entry after the last one seen; counts a gap if some were trimmed first."""
        while True:
            if self.last_id != "0-0":
                first = cast(
                    list[tuple[str, dict[str, str]]],
                    await self.redis.xrange(self.key, "-", "+", count=1),
                )
                if first and _order(first[0][0]) > _order(self.last_id):
                    self.gaps += 1  # trimmed before the tap read them
            batch = cast(
                list[tuple[str, dict[str, str]]],
                await self.redis.xrange(self.key, f"({self.last_id}", "+", count=BATCH),
            )
            for entry_id, fields in batch:
                self._keep(entry_id, fields)
            if len(batch) < BATCH:
                return

    def _keep(self, entry_id: str, fields: dict[str, str]) -> None:
        self.last_id = entry_id
        self.entries += 1
        entry = Entry(
            int(entry_id.split("-")[0]),
            fields.get("type", ""),
            fields.get("status", ""),
            int(fields.get("fence", 0)),
        )
        self.by_run.setdefault(fields.get("run_id", ""), []).append(entry)


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
