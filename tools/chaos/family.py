"""The invariants of runs that start runs (issue 17), checked after the chaos settles.

The ``family`` workload runs ``chaos.family``: a parent spawns 2-3 ``chaos.tick``
children and joins them (parked, no lease) through every fault. From the stored runs:

* ``child_doubled``: one child per spawn step. Counted by the children's own
  ``parent_id`` (not Leasehold's index): no parent has more children than it asked for,
  and its index names exactly the children that exist.
* ``child_outcome_unseen``: a parent that succeeded returned every child of it, each
  with the terminal status the child's own record has (no end was lost on its way to
  the parent's slot). A child whose record is gone because the janitor's purge or
  DELETE took it (answered, or unanswered but covering its end) is judged by the
  deletion promises, not here: the parent saw it before it was deleted.
* ``child_left_running``: at the end, no child is live whose parent ended (every
  child is spawned with ``on_parent_end="cancel"``: the cascade reached it).
* a joining parent holds no lease (``parked_holds_lease``, checker.py) and no slot
  (``slot_leaked`` / ``key_over_limit``, flow.py: a join's ``wait`` ends its hold).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable

import redis.asyncio as aioredis

from app.models import TERMINAL_STATUSES
from app.store.keys import QueueKeys, queue_of
from tools.chaos.checker import Snapshot, StoredRun, Violation

HANDLER = "chaos.family"
TERMINAL = {status.value for status in TERMINAL_STATUSES}


def child_ids(snapshot: Snapshot) -> frozenset[str]:
    """The runs a parent spawned (no client created them: :func:`check_families` judges them)."""
    return frozenset(run.id for run in snapshot.runs.values() if run.fields.get("parent_id"))


def _children_of(snapshot: Snapshot) -> dict[str, list[StoredRun]]:
    children: dict[str, list[StoredRun]] = defaultdict(list)
    for run in snapshot.runs.values():
        parent = run.fields.get("parent_id")
        if parent:
            children[parent].append(run)
    return children


async def check_families(
    client: aioredis.Redis,
    prefix: str,
    snapshot: Snapshot,
    deleted: Callable[[str], bool] = lambda run_id: False,
) -> list[Violation]:
    """``child_doubled``, ``child_outcome_unseen`` and ``child_left_running`` (module doc).

    ``deleted`` says whether the janitor may have deleted a run whose record is gone.
    """
    found: list[Violation] = []
    children = _children_of(snapshot)
    for parent in snapshot.runs.values():
        if parent.fields.get("handler") != HANDLER:
            continue
        kids = children.get(parent.id, [])
        found += await _check_count(client, prefix, parent, kids)
        found += _check_seen(parent, kids, deleted)
    for parent_id, kids in children.items():
        parent = snapshot.runs.get(parent_id)
        if parent is None or parent.status not in TERMINAL:
            continue
        for kid in kids:
            if kid.status not in TERMINAL:
                detail = f"parent {parent_id} ended {parent.status}; child is {kid.status}"
                found.append(Violation("child_left_running", kid.id, detail))
    return found


async def _check_count(
    client: aioredis.Redis, prefix: str, parent: StoredRun, kids: list[StoredRun]
) -> list[Violation]:
    asked = json.loads(parent.fields.get("input") or "{}").get("children", 2)
    queue = queue_of(parent.id)
    assert queue is not None
    index = set(await client.zrange(QueueKeys(prefix, queue).children(parent.id), 0, -1))
    ids = {kid.id for kid in kids}
    if len(kids) > asked:
        detail = f"asked for {asked} children, {len(kids)} exist: {sorted(ids)}"
        return [Violation("child_doubled", parent.id, detail)]
    if index and ids - index:
        detail = f"children not in the parent's index: {sorted(ids - index)}"
        return [Violation("child_doubled", parent.id, detail)]
    return []


def _check_seen(
    parent: StoredRun, kids: list[StoredRun], deleted: Callable[[str], bool]
) -> list[Violation]:
    if parent.status != "succeeded":
        return []
    output = json.loads(parent.fields.get("output") or "{}")
    actual = {kid.id: kid.status for kid in kids}
    seen = {
        entry["id"]: entry["status"]
        for entry in output.get("children", [])
        if entry["id"] in actual or not deleted(entry["id"])
    }
    if seen != actual:
        detail = f"returned {seen}, the children's records say {actual}"
        return [Violation("child_outcome_unseen", parent.id, detail)]
    return []
