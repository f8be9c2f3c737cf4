"""The courier: one per queue, it owns the worker's round trips to that queue.

Finished runs hand their outcome to the courier and wait; the courier sends
every outcome pending at that moment *and* a claim for the slots that are
free in a single pipelined round trip (group commit). While that trip is in
flight, new outcomes accumulate for the next one, so under load a round trip
finishes and claims dozens of runs.

The terminal write lives here, not in the run's task, on purpose: cancelling a
run (a client's cancel, a drain, a lost lease) can never cancel the write of its
own outcome. A failed round trip is retried with backoff until Redis answers;
Redis then says OK, RETRY or LOST for each outcome.

Idle workers block on the queue's wake list (BLPOP) in a separate waiter task,
so a producer's ``create`` wakes a worker at once; there is no polling loop.
The waiter's timeout is only a safety net and the moment the next delayed retry
becomes due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from app.executor.slots import Slots
from app.store.leases import ClaimedRun, LeaseStore, Outcome
from app.store.scripts import ScriptCode

log = logging.getLogger(__name__)

BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 1.0
MIN_WAIT_S = 0.01

StartRun = Callable[[ClaimedRun, float], None]


class Courier:
    """Batches finishes and claims for one queue."""

    def __init__(self, *, queue: str, store: LeaseStore, owner_id: str, slots: Slots,
                 start_run: StartRun, batch_max: int, idle_wake_s: float) -> None:
        self.queue = queue
        self._store = store
        self._owner_id = owner_id
        self._slots = slots
        self._start_run = start_run
        self._batch_max = batch_max
        self._idle_wake_s = idle_wake_s
        self._outcomes: list[tuple[Outcome, asyncio.Future[ScriptCode]]] = []
        self._kick = asyncio.Event()
        self._claiming = True
        self._maybe_ready = True  # ready may hold runs: claim when slots are free
        self._token_unserved = False  # a wake token this worker took but could not use
        self._next_due_ms: int | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start the courier loop and its waiter."""
        self._tasks = [asyncio.create_task(self._run(), name=f"courier:{self.queue}"),
                       asyncio.create_task(self._wait_for_work(), name=f"waiter:{self.queue}")]
        self._kick.set()

    async def close(self) -> None:
        """Stop both tasks; outcomes still pending are abandoned (their leases expire)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stop_claiming(self) -> None:
        """Drain: keep writing outcomes, claim nothing more."""
        self._claiming = False
        self._kick.set()

    def kick(self) -> None:
        """A slot was freed somewhere in the worker: maybe claim more."""
        self._kick.set()

    @property
    def pending(self) -> int:
        """Outcomes waiting for their round trip."""
        return len(self._outcomes)

    async def finish(self, outcome: Outcome) -> ScriptCode:
        """Record a run's outcome; returns OK, RETRY or LOST once Redis has answered.

        Cancelling the caller does not cancel the write: it is sent by the courier.
        """
        future: asyncio.Future[ScriptCode] = asyncio.get_running_loop().create_future()
        self._outcomes.append((outcome, future))
        self._kick.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            await self._exchange_until_idle()

    async def _exchange_until_idle(self) -> None:
        """Round trips until nothing is pending and the queue looks empty."""
        delay = BACKOFF_START_S
        while True:
            batch = self._outcomes
            self._outcomes = []
            wanted = self._slots.reserve(self._batch_max) if self._wants_claim() else 0
            if not batch and not wanted:
                await self._pass_on_token()
                return
            sent_at = time.monotonic()
            try:
                codes, claim = await self._store.finish_and_claim(
                    self.queue, self._owner_id, [outcome for outcome, _ in batch], wanted)
            except (RedisError, OSError) as exc:
                self._slots.give_back(wanted)
                self._outcomes[:0] = batch
                log.warning("queue %s: round trip failed, retrying in %.2fs: %s",
                            self.queue, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            delay = BACKOFF_START_S
            for (_, future), code in zip(batch, codes, strict=True):
                if not future.done():
                    future.set_result(code)
            self._slots.give_back(wanted - len(claim.runs))
            self._next_due_ms = claim.next_due_ms
            self._maybe_ready = len(claim.runs) == wanted and wanted > 0
            self._token_unserved = self._token_unserved and not wanted
            for run in claim.runs:
                self._start_run(run, sent_at)

    async def _pass_on_token(self) -> None:
        """A token taken while full must not be swallowed: an empty claim re-arms it."""
        if not self._token_unserved or not self._claiming:
            return
        self._token_unserved = False
        try:
            await self._store.claim(self.queue, self._owner_id, 0)
        except (RedisError, OSError) as exc:
            log.warning("queue %s: could not pass the wake token on: %s", self.queue, exc)

    def _wants_claim(self) -> bool:
        return self._claiming and self._maybe_ready and self._slots.free > 0

    async def _wait_for_work(self) -> None:
        """Block on the wake list while this worker has room; kick the courier on a token."""
        while True:
            await self._slots.wait_available()
            if not self._claiming:
                return
            try:
                if await self._store.wait_for_work(self.queue, self._wait_timeout()):
                    self._token_unserved = True
            except (RedisError, OSError) as exc:
                log.warning("queue %s: waiting for work failed: %s", self.queue, exc)
                await asyncio.sleep(BACKOFF_MAX_S)
            # a token, a timeout (safety net / due retry) or a reconnect: look again
            self._maybe_ready = True
            self._kick.set()

    def _wait_timeout(self) -> float:
        timeout = self._idle_wake_s
        if self._next_due_ms is not None:
            timeout = min(timeout, self._next_due_ms / 1000 - time.time())
        return max(MIN_WAIT_S, timeout)
