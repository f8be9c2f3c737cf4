"""The flow-control invariants of issue 15, checked after the chaos settles.

* ``key_over_limit``: at no moment were more runs of one ``concurrency_key``
  running than its limit. Read from each run's event history: a run holds a slot of
  its key from its ``claimed`` event until the next event that takes the run from
  its owner or ends it (terminal, ``released``, ``requeued``, ``lease_expired``,
  ``waiting_human``, ``reconciliation_required``, or park_run's ``wait`` at a fence past
  the claim's), by the Redis clock of the stream
  ids; at one millisecond an end counts before a start (a slot given back and taken
  again in the same millisecond is not two at once). A hold that began and ended in one
  millisecond (claimed, then finished by the next script in the same ms) has no length at
  this resolution and is not counted: with the end-before-start rule it would otherwise
  stay "running" for ever after its own end.
* ``slot_leaked``: once everything settled, the queue's slot counters say exactly
  what its live leases hold (every slot came back, none counted twice).
"""

from __future__ import annotations

from collections import defaultdict
from typing import cast

import redis.asyncio as aioredis

from app.models import TERMINAL_EVENT_TYPES
from app.store.keys import QueueKeys
from tools.chaos.checker import Event, Snapshot, StoredRun, Violation

# what the workload's keyed runs may run at once, per key (set with PUT /queues/{q}/limits)
KEY_LIMIT = 2
# what the reconciler logs when it had to set a counter right (app/store/flow/store.py)
RECOUNT_LINE = "its leases hold"
ENDS = TERMINAL_EVENT_TYPES | {
    "released",
    "requeued",
    "lease_expired",
    "waiting_human",
    "reconciliation_required",
}


def _parks(event: Event, claim_fence: int) -> bool:
    """A `wait` past the claim's fence is park_run's (a durable sleep, a signal): the lease
    and the slot went with it. A handler's own `wait` (an operation) keeps the claim's."""
    return event.type == "wait" and event.fence > claim_fence


def _ms(event_id: str) -> int:
    return int(event_id.split("-", 1)[0])


def held_intervals(run: StoredRun, now_ms: int) -> list[tuple[int, int]]:
    """[claimed, end) of every slot the run's events say it held (end: now if still held)."""
    intervals: list[tuple[int, int]] = []
    start: int | None = None
    fence = 0
    for event in run.events:
        if event.type == "claimed":
            if start is not None:  # a claim without an end between: the end was trimmed
                intervals.append((start, _ms(event.id)))
            start, fence = _ms(event.id), event.fence
        elif start is not None and (event.type in ENDS or _parks(event, fence)):
            intervals.append((start, _ms(event.id)))
            start = None
    if start is not None:
        intervals.append((start, now_ms))
    return intervals


def check_key_limits(snapshot: Snapshot, limit: int = KEY_LIMIT) -> list[Violation]:
    """No key ran more than ``limit`` runs at any moment (from the event histories)."""
    by_key: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for run in snapshot.runs.values():
        key = run.fields.get("ckey")
        if key:
            for begin, end in held_intervals(run, snapshot.now_ms):
                if end <= begin:  # held for under a millisecond: nothing to overlap
                    continue
                by_key[key].append((begin, 1, run.id))
                by_key[key].append((end, 0, run.id))  # 0 sorts first: an end before a start
    violations = []
    for key, marks in sorted(by_key.items()):
        running: set[str] = set()
        for at, kind, run_id in sorted(marks):
            if kind == 0:
                running.discard(run_id)
                continue
            running.add(run_id)
            if len(running) > limit:
                violations.append(
                    Violation(
                        "key_over_limit",
                        run_id,
                        f"key {key}: {len(running)} running at {at} ms (limit {limit}): "
                        f"{sorted(running)}",
                    )
                )
                break  # one per key is enough to see it
    return violations


async def check_slots_returned(
    client: aioredis.Redis, prefix: str, queue: str, snapshot: Snapshot
) -> list[Violation]:
    """The slot counters equal what the live leases hold, once the chaos settled."""
    keys = QueueKeys(prefix, queue)
    counted = cast(dict[str, str], await client.hgetall(keys.slots))
    held: dict[str, int] = defaultdict(int)
    singletons: dict[str, str] = {}
    for run_id in snapshot.leases:
        run = snapshot.runs.get(run_id)
        if run is None or run.status not in ("running", "cancelling"):
            continue
        for resource in filter(None, run.fields.get("held", "").split("\n")):
            if resource.startswith("s:"):
                singletons[resource] = run_id
            else:
                held[resource] += 1
    expected = {res: str(n) for res, n in held.items()} | singletons
    if counted == expected:
        return []
    wrong = sorted(
        set(counted) ^ set(expected) | {r for r in counted if counted[r] != expected.get(r)}
    )
    return [
        Violation(
            "slot_leaked",
            "",
            f"{res}: the counters say {counted.get(res)!r}, the live leases hold "
            f"{expected.get(res)!r}",
        )
        for res in wrong
    ]


def check_no_recount(logs: dict[str, str], redis_restarted: bool) -> list[Violation]:
    """No reconciler had to repair a slot counter, unless Redis lost writes (a restart).

    The recount would hide a leak from :func:`check_slots_returned`: what it fixed
    is in the workers' logs.
    """
    if redis_restarted:
        return []
    return [
        Violation("slot_recounted", "", f"{name}: {line.strip()[:200]}")
        for name, text in sorted(logs.items())
        for line in text.splitlines()
        if RECOUNT_LINE in line
    ]
