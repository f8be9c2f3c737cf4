"""The outbox: a run's end that must reach another slot, delivered at least once.

In Redis Cluster a parent and its children may live on different nodes, so the
script that ends a run cannot touch its parent's keys or its children's. Instead
``finalize`` (finalize.lua ``note_family_end``) adds, in the same step as the terminal
state, an entry to the outbox of the run's own slot:

* ``ended <child> <parent>``: the child's outcome must reach its parent:
  :meth:`Outbox.deliver` reads the child's record (its slot) and sends ``child_ended``
  to the parent's slot, which records the outcome once and wakes a parked join whose
  condition now holds. A child whose record is gone by then (its retention ended
  while its delivery was stuck, a manual ``DEL``) reaches its parent as ``failed``,
  error ``child_record_gone``, so the parent's join still settles by its mode; a
  parent whose record is gone ends the entry (``child_ended`` answers NOT_FOUND);
* ``cascade <parent>``: the parent's live children get its end: ``cancel_children``
  in each child queue's slot cancels those whose policy is ``cancel`` (every live
  child when the parent was cancelled), tombstoning any not yet created.

**A child deleted before it ended** (a manual ``DEL`` of a queued or running child:
no script ends it, so no entry is ever written) would leave its parent's join
waiting until its timeout, or for ever. A parked join is therefore listed in its
queue's ``joins`` zset (``join_children``), and every reconciler's sweep also
checks the longest-unchecked of them (:meth:`Outbox.check_joins`, each at most every
``JOIN_CHECK_MS``): a child the join still waits for whose record is gone is
delivered as an ``ended`` entry would be, as ``child_record_gone``. A join parked
by an older version is not listed: it keeps waiting for its timeout.

The entry is removed only after its delivery is written. Whoever ran the terminal
transition delivers at once when it knows there is something to deliver (the API's
cancel, a worker finishing a run that spawned); every reconciler sweeps the rest on
``LEASEHOLD_OUTBOX_SWEEP_S`` (a crash between the two, a child's end). A taken
entry is held from other deliverers for ``HOLD_MS`` (``take_outbox``); each delivery
script is idempotent, so a second delivery writes nothing. A cancelled child's own
end is a new entry of its slot, delivered the same way: the cascade is recursive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import cast

from app.models import RunStatus
from app.store.codec import dumps
from app.store.context import Store
from app.store.keys import queue_of
from app.store.outbox.bindings import (
    CANCEL_CHILDREN,
    CHILD_ENDED,
    TAKE_OUTBOX,
    CancelChildrenArgs,
    ChildEndedArgs,
    ChildIdGroup,
    TakeOutboxArgs,
)

log = logging.getLogger(__name__)

HOLD_MS = 30_000  # a taken entry is handed to nobody else for this long
TAKE_MAX = 100  # entries one take hands out
CANCEL_CHUNK = 500  # children one cancel_children call ends
READ_CHUNK = 1000  # children index entries read per round trip
# a child cancelled before it existed stays unborn this long (a stale parent worker that
# wakes later still cannot create it)
UNBORN_MS = 7 * 24 * 3600 * 1000
FOLLOW_ROUNDS = 8  # queues touched by a delivery are swept again, this many times at most
JOIN_CHECK_MS = 5_000  # a parked join's children are looked for at most this often
JOIN_CHECK_MAX = 100  # parked joins one check_joins call looks at, per queue
# the outcome a parent gets for a child whose record was gone before its end was delivered
GONE_ERROR = dumps(
    {
        "code": "child_record_gone",
        "message": "the child's record was gone (its retention ended, or it was deleted by "
        "hand) before its end reached its parent: its outcome cannot be read",
        "retryable": False,
        "details": {},
    }
)


class Outbox(Store):
    """Takes and delivers the queues' outbox entries; any number may run at once."""

    async def take(self, queue: str, entry: str = "") -> list[str]:
        """The queue's due entries (or just ``entry``), held from other deliverers for a while."""
        args = TakeOutboxArgs(TAKE_MAX, HOLD_MS, entry)
        return await TAKE_OUTBOX.send(self.scripts, self.client, self.keys(queue), args)

    async def holding(self, queues: Iterable[str]) -> set[str]:
        """Those of ``queues`` whose outbox holds any entry: one pipelined EXISTS each.

        Nearly every sweep finds every outbox empty (plain runs never write one): an
        EXISTS is a key lookup where ``take_outbox`` is a script call, so an empty
        sweep costs Redis one round trip of cheap reads and no script.
        """
        ordered = sorted(set(queues))
        if not ordered:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for queue in ordered:
            pipe.exists(self.keys(queue).outbox)
        found = cast(list[int], await pipe.execute())
        return {queue for queue, n in zip(ordered, found, strict=True) if n}

    async def sweep(self, queues: Iterable[str]) -> int:
        """Deliver every due entry of ``queues``, following the ends they cause; how many.

        Only queues whose outbox holds anything are taken from (:meth:`holding`). A
        cascade's cancelled children and a child's woken parent may add entries in
        other queues: those are swept right after, a few rounds at most (the next
        sweep takes the rest).
        """
        done = 0
        todo = await self.holding(queues)
        for _ in range(FOLLOW_ROUNDS):
            touched: set[str] = set()
            for queue in sorted(todo):
                while entries := await self.take(queue):
                    for entry in entries:
                        touched |= await self.deliver(queue, entry)
                    done += len(entries)
                    if len(entries) < TAKE_MAX:
                        break
            if not touched:
                break
            todo = touched
        return done

    async def check_joins(self, queue: str) -> int:
        """Deliver ``child_record_gone`` for each child whose record vanished while a parked
        join of ``queue`` waits for it; returns how many were delivered.

        Looks at the JOIN_CHECK_MAX joins checked longest ago (none more often than
        JOIN_CHECK_MS) and drops from the list the parents no longer waiting. Safe beside
        any deliverer: ``child_ended`` records one outcome per child, the first wins.
        """
        keys = self.keys(queue)
        seconds, micros = await self.client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        parents = cast(
            list[str],
            await self.client.zrangebyscore(
                keys.joins, "-inf", now_ms - JOIN_CHECK_MS, start=0, num=JOIN_CHECK_MAX
            ),
        )
        if not parents:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for parent_id in parents:
            pipe.hget(keys.run(parent_id), "status")
            pipe.smembers(keys.joining(parent_id))
        replies = await pipe.execute()
        over = [p for i, p in enumerate(parents) if replies[2 * i] != RunStatus.WAITING.value]
        if over:
            await self.client.zrem(keys.joins, *over)
        waited = {
            parent_id: cast(set[str], replies[2 * i + 1])
            for i, parent_id in enumerate(parents)
            if parent_id not in over
        }
        if waited:
            await self.client.zadd(keys.joins, dict.fromkeys(waited, now_ms), xx=True)
        gone = 0
        for child_id, parent_id in await self._vanished(waited):
            await self._ended(cast(str, queue_of(child_id)), child_id, parent_id)
            gone += 1
        return gone

    async def _vanished(self, waited: dict[str, set[str]]) -> list[tuple[str, str]]:
        """(child, parent) of the awaited children with no record, read in their slots."""
        by_queue: dict[str, list[tuple[str, str]]] = {}
        for parent_id, children in waited.items():
            for child_id in sorted(children):
                child_queue = queue_of(child_id)
                if child_queue is not None:
                    by_queue.setdefault(child_queue, []).append((child_id, parent_id))
        found = []
        for child_queue, pairs in sorted(by_queue.items()):
            pipe = self.client.pipeline(transaction=False)
            for child_id, _ in pairs:
                pipe.exists(self.keys(child_queue).run(child_id))
            present: list[int] = await pipe.execute()
            found += [pair for pair, n in zip(pairs, present, strict=True) if not n]
        return found

    async def deliver_end_of(self, run_id: str) -> int:
        """At-once delivery of what ``run_id``'s end left (its cascade), and what follows."""
        queue = queue_of(run_id)
        if queue is None:
            return 0
        touched: set[str] = set()
        entries = await self.take(queue, f"cascade {run_id}")
        for entry in entries:
            touched |= await self.deliver(queue, entry)
        return len(entries) + (await self.sweep(touched) if touched else 0)

    async def deliver(self, queue: str, entry: str) -> set[str]:
        """Write one entry's delivery, then remove it; the queues it may have added entries to."""
        kind, _, run_id = entry.partition(" ")
        touched: set[str] = set()
        if kind == "ended":
            child_id, _, parent_id = run_id.partition(" ")
            touched = await self._ended(queue, child_id, parent_id)
        elif kind == "cascade":
            touched = await self._cascade(queue, run_id)
        else:
            log.warning("outbox entry %r of queue %s is not one this store wrote", entry, queue)
        await self.client.zrem(self.keys(queue).outbox, entry)
        return touched

    async def _ended(self, queue: str, child_id: str, named_parent: str) -> set[str]:
        """``child_ended`` on the parent's slot with the child's outcome, read in its slot.

        ``named_parent`` is the parent the entry names ('' in an entry written before
        entries named it). A child whose record is gone (its retention ended before the
        delivery, a manual ``DEL``) ends its parent's wait as a failure that says so
        (:data:`GONE_ERROR`): a join must never wait for an outcome nobody can read.
        """
        status, output, error, parent_id = cast(
            list[str | None],
            await self.client.hmget(
                self.keys(queue).run(child_id), ["status", "output", "error", "parent_id"]
            ),
        )
        reason = ""
        if not status:
            parent_id, reason = named_parent, "child_record_gone"
            status, output, error = RunStatus.FAILED.value, None, GONE_ERROR
            log.warning("child %s has no record left: its parent gets it as failed", child_id)
        parent_queue = queue_of(parent_id or "")
        if not parent_id or parent_queue is None:
            log.warning("child %s names no parent it can reach: its end is dropped", child_id)
            return set()
        outcome = (
            f'{{"status":{dumps(status)},"output":{output or "null"},"error":{error or "null"}}}'
        )
        keys = self.keys(parent_queue)
        args = ChildEndedArgs(
            parent_id=parent_id,
            child_id=child_id,
            status=status,
            outcome=outcome,
            maxlen=self.events_maxlen,
            wake_channel=keys.wake_channel,
            reason=reason,
        )
        # NOT_FOUND (the parent's record is gone too) and INVALID (it ended) write
        # nothing: the entry is done either way
        await CHILD_ENDED.send(self.scripts, self.client, keys, args)
        return set()

    async def _cascade(self, queue: str, parent_id: str) -> set[str]:
        """``cancel_children`` in each child queue for the live children the policy reaches."""
        keys = self.keys(queue)
        status = cast(str | None, await self.client.hget(keys.run(parent_id), "status"))
        if status is not None and not RunStatus(status).is_terminal:
            return set()  # not ended after all
        # a record gone (by hand, or with its retention: its index then too) still ended,
        # the entry says so: its children get a parent's end, the detached ones kept
        cancelled = status == RunStatus.CANCELLED.value
        targets: dict[str, list[str]] = {}
        for chunk in await self._children(queue, parent_id):
            flags = await self.client.hmget(
                keys.family(parent_id),
                [f for child in chunk for f in (f"out:{child}", f"detach:{child}")],
            )
            for i, child in enumerate(chunk):
                ended, detached = flags[2 * i], flags[2 * i + 1]
                child_queue = queue_of(child)
                if ended or (detached and not cancelled) or child_queue is None:
                    continue
                targets.setdefault(child_queue, []).append(child)
        reason = "parent_cancelled" if cancelled else "parent_ended"
        for child_queue, ids in targets.items():
            for first in range(0, len(ids), CANCEL_CHUNK):
                await self._cancel(
                    child_queue, parent_id, reason, ids[first : first + CANCEL_CHUNK]
                )
        return set(targets)

    async def _children(self, queue: str, parent_id: str) -> list[list[str]]:
        index = self.keys(queue).children(parent_id)
        chunks: list[list[str]] = []
        start = 0
        while chunk := cast(
            list[str], await self.client.zrange(index, start, start + READ_CHUNK - 1)
        ):
            chunks.append(chunk)
            start += READ_CHUNK
        return chunks

    async def _cancel(self, queue: str, parent_id: str, reason: str, ids: list[str]) -> None:
        args = CancelChildrenArgs(
            parent_id=parent_id,
            reason=reason,
            retention=self.retention.script_arg(),
            maxlen=self.events_maxlen,
            unborn_ms=UNBORN_MS,
            groups=[ChildIdGroup(child_id) for child_id in ids],
        )
        reply = await CANCEL_CHILDREN.send(self.scripts, self.client, self.keys(queue), args)
        if reply.code != "OK":
            log.warning("cascade of %s skipped %s: it names another parent", parent_id, reply.value)
