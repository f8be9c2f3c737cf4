"""Flow control of a queue: its concurrency limits, the slots held, the busiest keys.

The slots themselves are taken and given back only by the run scripts (``claim_runs``
takes them; ``release_held`` in slots.lua, called by every script that ends, parks,
releases or requeues a run, gives them back), so no path here can leak one. This module
declares the limits (``set_limits``), reads what a queue's flow control looks like for
``GET /queues/{name}`` and ``/metrics``, changes a queued run's priority, and lets the
reconciler recount the slots from the live leases (``recount_slots``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from app.errors import RunNotFound
from app.models.read import HandlerUsage, KeyUsage, QueueFlow, QueueLimits
from app.store.flow.bindings import (
    RECOUNT_SLOTS,
    SET_LIMITS,
    SET_PRIORITY,
    LimitPair,
    RecountArgs,
    SetLimitsArgs,
    SetPriorityArgs,
)
from app.store.keys import QueueKeys, queue_of
from app.store.lua.scripts import Scripts
from app.store.lua.transition import raise_for
from app.store.redis.connection import AsyncRedis

log = logging.getLogger(__name__)

# blocked lanes one set_limits or recount moves back to the ring at most; the next
# reconcile pass wakes the rest
WAKE_MAX = 1000


@dataclass(frozen=True)
class SlotFix:
    """One slots counter the reconciler found disagreeing with the leases, and set right."""

    queue: str
    field: str  # h:<handler>, k:<key>, s:<singleton key>
    counted: str  # what the counter said ('' for nothing)
    held: str  # what the leases hold ('' for nothing)


def limits_fields(limits: QueueLimits) -> list[str | int]:
    """The ``limits`` hash as field, value pairs (``q``, ``h:<handler>``, ``k:*``, ``k:<key>``)."""
    pairs: list[str | int] = []
    if limits.queue is not None:
        pairs += ["q", limits.queue]
    for handler, limit in sorted(limits.handlers.items()):
        pairs += [f"h:{handler}", limit]
    if limits.default_key is not None:
        pairs += ["k:*", limits.default_key]
    for key, limit in sorted(limits.keys.items()):
        pairs += [f"k:{key}", limit]
    return pairs


def limits_from(fields: dict[str, str]) -> QueueLimits:
    """The limits a ``limits`` hash holds (the inverse of :func:`limits_fields`)."""
    handlers = {f[2:]: int(v) for f, v in fields.items() if f.startswith("h:")}
    keys = {f[2:]: int(v) for f, v in fields.items() if f.startswith("k:") and f != "k:*"}
    return QueueLimits(
        queue=int(fields["q"]) if "q" in fields else None,
        handlers=handlers,
        default_key=int(fields["k:*"]) if "k:*" in fields else None,
        keys=keys,
    )


class FlowStore:
    """Holds a Redis client; the flow-control reads and writes that are not run transitions."""

    def __init__(
        self, client: AsyncRedis, *, scripts: Scripts, prefix: str, events_maxlen: int
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.events_maxlen = events_maxlen

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)

    async def set_limits(self, queue: str, limits: QueueLimits) -> int:
        """Replace the queue's limits whole; returns how many blocked lanes it woke.

        A raised or removed limit lets waiting runs start at once (their lanes go back
        to the ring); a lowered one stops claims until fewer run, and stops nothing.
        """
        keys = self.keys(queue)
        fields = limits_fields(limits)
        pairs = [LimitPair(str(f), int(v)) for f, v in zip(fields[::2], fields[1::2], strict=True)]
        args = SetLimitsArgs(WAKE_MAX, keys.wake_channel, pairs)
        return await SET_LIMITS.send(self.scripts, self.client, keys, args)

    async def limits(self, queue: str) -> QueueLimits:
        """The queue's declared limits (none declared: every field unlimited)."""
        fields = cast(dict[str, str], await self.client.hgetall(self.keys(queue).limits))
        return limits_from(fields)

    async def flow(self, queue: str, top_keys: int) -> QueueFlow:
        """Limits, slots per handler, the ``top_keys`` busiest keys and how many resources wait.

        Bounded: the slots hash has one field per handler and key that has a run
        running (at most the running runs), the queued keys are read top-N by count.
        """
        keys = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(keys.limits)
        pipe.hgetall(keys.slots)
        pipe.zrevrange(keys.kqueued, 0, top_keys - 1, withscores=True)
        pipe.scard(keys.blocked)
        raw_limits, slots, queued_top, blocked = await pipe.execute()
        limits = limits_from(raw_limits)
        running = {f: int(v) for f, v in slots.items() if not f.startswith("s:")}
        handlers = sorted({f[2:] for f in running if f.startswith("h:")} | set(limits.handlers))
        queued = {key: int(score) for key, score in queued_top}
        busiest = sorted(
            {f[2:] for f in running if f.startswith("k:")} | set(queued),
            key=lambda key: (-running.get(f"k:{key}", 0), -queued.get(key, 0), key),
        )[:top_keys]
        missing = [key for key in {*busiest, *limits.keys} if key not in queued]
        if missing:
            scores = await self.client.zmscore(keys.kqueued, missing)
            queued.update({k: int(s or 0) for k, s in zip(missing, scores, strict=True)})

        def usage(key: str) -> KeyUsage:
            limit = limits.keys.get(key, limits.default_key)
            return KeyUsage(
                key=key, running=running.get(f"k:{key}", 0), queued=queued[key], limit=limit
            )

        return QueueFlow(
            limits=limits,
            handlers=[
                HandlerUsage(
                    handler=h, running=running.get(f"h:{h}", 0), limit=limits.handlers.get(h)
                )
                for h in handlers
            ],
            keys=[usage(key) for key in busiest],
            limited_keys=[usage(key) for key in sorted(limits.keys)],
            key_slots=sum(n for f, n in running.items() if f.startswith("k:")),
            blocked=int(blocked),
        )

    async def set_priority(self, run_id: str, priority: int, boost_ms: int) -> None:
        """Change a queued run's priority (rescored in its lane, keeping its age).

        Raises :class:`RunNotFound`, or :class:`InvalidTransition` unless it is queued.
        """
        queue = queue_of(run_id)
        if queue is None:
            raise RunNotFound(run_id)
        args = SetPriorityArgs(run_id, priority, boost_ms, self.events_maxlen)
        reply = await SET_PRIORITY.send(self.scripts, self.client, self.keys(queue), args, run_id)
        raise_for(reply.code, run_id=run_id, status=reply.status, action="change the priority of")

    async def recount(self, queue: str) -> tuple[list[SlotFix], int]:
        """Set the queue's slot counters to what its live leases hold; the fixes and lanes woken.

        Each fix is logged here (a counter that disagreed is a bug or a restored
        snapshot, and the operator should hear of it); the caller counts them.
        """
        keys = self.keys(queue)
        reply = await RECOUNT_SLOTS.send(
            self.scripts, self.client, keys, RecountArgs(WAKE_MAX, keys.wake_channel)
        )
        woken = reply.woken
        found = [SlotFix(queue, *fix) for fix in reply.fixes]
        for fix in found:
            log.warning(
                "slot counter %s of queue %s said %r, its leases hold %r: recounted",
                fix.field,
                queue,
                fix.counted,
                fix.held,
            )
        return found, woken
