"""The courier: one per queue, it owns the worker's round trips to that queue.

Finished runs hand their outcome to the courier and wait; the courier sends
every outcome pending at that moment *and* a claim for the slots that are
free in a single pipelined round trip (group commit). While that trip is in
flight, new outcomes accumulate for the next one, so under load a round trip
finishes and claims dozens of runs.

The terminal write lives here, not in the run's task, on purpose: cancelling a
run (a client's cancel, a drain, a lost lease) can never cancel the write of its
own outcome. A failed round trip is retried with backoff until Redis answers;
Redis then says OK, RETRY, CANCEL or LOST for each outcome. A claim whose answer
never came may still have run in Redis, so it is sent again with the same
token and the same reserved slots: ``claim_runs`` answers a repeated token with
the runs the first call took, and no run is left leased to a worker that does
not know it holds it.

When Redis is full it takes terminal writes but refuses claims (see
``SCRIPT_FLAGS`` in :mod:`app.store.scripts`): the outcomes sent with a refused
claim are settled, and claims pause with backoff while outcomes keep flowing.
A refused terminal write (out of memory, read-only after a failover, no
answer) keeps its outcome here and is sent again until Redis takes it or
answers LOST (another owner holds the run now).

**Two round trips in flight.** The worker's Python and redis-server each take a
core: with one trip at a time they alternate, each idle while the other works.
So a courier keeps up to ``trips_in_flight`` trips going
(``LEASEHOLD_ROUND_TRIPS_IN_FLIGHT``), and a claim takes at most its share of the
concurrency (:attr:`Courier.claim_max`): while Redis runs
one trip (finishing one half of the runs, leasing the next), the worker executes
the runs the other trip brought. Runs held never exceed the slots, as before:
each trip reserves its own. A claim whose answer was lost is resent by exactly
one later trip (two trips with one token would both start its runs).

A second trip claims only while a backlog is known (the last claim came back full)
or a wake came after the claim in flight was sent: an idle worker woken for one run
sends one claim, not one per trip, and one finish (3.27 round trips per run at
50 runs/s with both trips claiming on each wake, 2.26 with one trip).

Idle couriers sleep until :meth:`Courier.notify_ready` is called by the
worker's :class:`~app.executor.listener.ChannelListener` (a script published on
the queue's wake channel), so a producer's ``create`` wakes workers at once;
there is no polling loop. A timer (``idle_wake_s``, or sooner when a delayed
retry is due) is only a safety net for a wake-up missed while reconnecting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from app.executor.slots import Slots
from app.metrics import CLAIMS_THROTTLED, WORKER_WRITES_REFUSED
from app.retry import REDIS_BACKOFF, Streak
from app.store.leases import Claim, ClaimedRun, LeaseStore, Outcome, new_claim_token
from app.store.refusals import describe, refusal_of
from app.store.transitions import LeaseAnswer

log = logging.getLogger(__name__)

MIN_WAIT_S = 0.01

StartRun = Callable[[ClaimedRun, float], None]


class Courier:
    """Batches finishes and claims for one queue."""

    def __init__(
        self,
        *,
        queue: str,
        store: LeaseStore,
        owner_id: str,
        slots: Slots,
        start_run: StartRun,
        batch_max: int,
        idle_wake_s: float,
        slots_returned: Callable[[], None] = lambda: None,
        trips_in_flight: int = 2,
    ) -> None:
        self.queue = queue
        self._store = store
        self._owner_id = owner_id
        self._slots = slots
        self._start_run = start_run
        self._batch_max = batch_max
        self._idle_wake_s = idle_wake_s
        # slots this courier reserved but did not fill go back to the worker's other
        # couriers, which may have found none free while its round trip was in flight
        # (it can last a while: a WAIT for replicas, a cluster node far away)
        self._slots_returned = slots_returned
        self._outcomes: list[tuple[Outcome, asyncio.Future[LeaseAnswer]]] = []
        self._kick = asyncio.Event()
        self._claiming = True
        self._maybe_ready = True  # ready may hold runs: claim when slots are free
        # the last claim answered came back full: every trip in flight may claim
        self._backlog = False
        # trips in flight with a claim, and the wake count when the last new claim went
        # out: one claim in flight covers every wake before it
        self._claim_trips: set[asyncio.Task[None]] = set()
        self._wakes_claimed = 0
        # wake messages so far: one that came while a claim was in flight is not lost
        self._wakes = 0
        self._next_due_ms: int | None = None
        # (token, reserved slots) of claims sent without an answer coming back, and not
        # in flight again: each is resent by one trip
        self._unanswered: list[tuple[str, int]] = []
        # Redis refused a claim (full, read-only): none is sent before this monotonic time
        self._claims_paused_until = 0.0
        self._claim_refusals = REDIS_BACKOFF.streak()
        self._failures = REDIS_BACKOFF.streak()
        self._trips: set[asyncio.Task[None]] = set()
        self._trips_max = trips_in_flight
        # a claim's share of the slots, so that the trips in flight split the work
        self.claim_max = max(1, min(batch_max, -(-slots.capacity // trips_in_flight)))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the courier loop."""
        self._task = asyncio.create_task(self._run(), name=f"courier:{self.queue}")
        self._kick.set()

    async def close(self) -> None:
        """Stop the loop and its trips; outcomes still pending are abandoned (their leases
        expire)."""
        tasks = [*self._trips] + ([self._task] if self._task is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop_claiming(self) -> None:
        """Drain: keep writing outcomes, claim nothing more."""
        self._claiming = False
        self._kick.set()

    def kick(self) -> None:
        """A slot was freed somewhere in the worker: maybe claim more."""
        self._kick.set()

    def notify_ready(self) -> None:
        """Runnable work appeared on the queue (a wake message): claim when there is room.

        The claim's trip is sent from here, in the listener's turn, rather than by the
        courier's loop once it wakes: one loop pass and the loop's timeout bookkeeping
        less between a wake message and its claim. The loop is kicked only when no
        trip could go now (all in flight: the first to end sends what is left).
        """
        self._maybe_ready = True
        self._wakes += 1
        if self._task is None or self._task.done() or not self._send_trips():
            self._kick.set()  # not started, closed, or no trip could go now

    @property
    def pending(self) -> int:
        """Outcomes waiting for their round trip."""
        return len(self._outcomes)

    async def finish(self, outcome: Outcome) -> LeaseAnswer:
        """Record a run's outcome; returns OK, RETRY, CANCEL or LOST once Redis has answered.

        Cancelling the caller does not cancel the write: it is sent by the courier.
        """
        future: asyncio.Future[LeaseAnswer] = asyncio.get_running_loop().create_future()
        self._outcomes.append((outcome, future))
        self._kick.set()
        return await future

    async def _run(self) -> None:
        while True:
            try:
                # asyncio.timeout, not wait_for: wait_for wraps the wait in a task of its
                # own, two more loop passes between a wake message and the claim it sends
                async with asyncio.timeout(self._wait_timeout()):
                    await self._kick.wait()
            except TimeoutError:
                self._maybe_ready = True  # safety net, or a delayed retry is due
            self._kick.clear()
            self._send_trips()

    def _send_trips(self) -> bool:
        """Send round trips until ``trips_in_flight`` are out or nothing is left to send;
        ``True`` when one was sent.

        Each carries every outcome pending now and a claim; a trip that ends kicks the
        loop, which sends what accumulated meanwhile.
        """
        sent = False
        while len(self._trips) < self._trips_max:
            token, wanted, resent = self._claim_to_send()
            batch = self._outcomes
            if not batch and not wanted:
                return sent
            self._outcomes = []
            trip = asyncio.get_running_loop().create_task(
                self._trip(batch, token, wanted, resent=resent)
            )
            self._trips.add(trip)
            if wanted:
                self._claim_trips.add(trip)
            trip.add_done_callback(self._trip_done)
            sent = True
        return sent

    def _trip_done(self, trip: asyncio.Task[None]) -> None:
        # a done callback runs after the first step of the tasks the trip started (their
        # handlers began): the next trip carries their outcomes, one loop pass per trip
        self._trips.discard(trip)
        self._claim_trips.discard(trip)
        if not trip.cancelled() and trip.exception() is not None:
            log.error("queue %s: round trip failed", self.queue, exc_info=trip.exception())
        self._kick.set()

    async def _trip(
        self,
        batch: list[tuple[Outcome, asyncio.Future[LeaseAnswer]]],
        token: str,
        wanted: int,
        *,
        resent: bool,
    ) -> None:
        """One round trip: write ``batch``'s outcomes, claim ``wanted`` runs, settle both."""
        sent_at = time.monotonic()
        try:
            codes, claim = await self._store.finish_and_claim(
                self.queue, self._owner_id, [outcome for outcome, _ in batch], wanted, token
            )
        except (RedisError, OSError) as exc:
            # the claim may have run in Redis: its slots stay reserved for the resend
            if wanted:
                self._unanswered.append((token, wanted))
            self._outcomes[:0] = batch
            # still in flight while it waits: no other trip is sent into the failure
            await asyncio.sleep(self._round_trip_failed(exc, bool(batch), self._failures))
            return
        self._failures.reset()
        for (_, future), code in zip(batch, codes, strict=True):
            if not future.done():
                future.set_result(code)
        if claim.refused is not None:
            self._claim_refused(token, wanted, claim.refused, resent=resent)
            return
        self._claim_answered(wanted, claim, sent_at, woken=self._wakes != self._wakes_claimed)

    def _claim_answered(self, wanted: int, claim: Claim, sent_at: float, *, woken: bool) -> None:
        """Start what the claim took; claim again only if the queue may still hold runs.

        A short claim says the queue was empty when the script ran, not that it is now:
        a wake message that came after the last new claim was sent (a run created just
        after the claim read the queue) keeps the courier claiming, else that run would
        wait for the ``idle_wake_s`` safety net. A full claim says more may wait: the
        trips in flight all claim until one comes back short.
        """
        unused = wanted - len(claim.runs)
        self._slots.give_back(unused)
        if unused:
            self._slots_returned()
        self._next_due_ms = claim.next_due_ms
        if claim.throttled:
            CLAIMS_THROTTLED.labels(self.queue).inc(claim.throttled)
        if self._claims_paused():
            return  # a trip that claimed nothing on purpose tells nothing about the queue
        self._claim_refusals.reset()
        self._backlog = len(claim.runs) == wanted and wanted > 0
        self._maybe_ready = woken or self._backlog
        for run in claim.runs:
            self._start_run(run, sent_at)

    def _claim_refused(self, token: str, wanted: int, exc: Exception, *, resent: bool) -> None:
        """Redis took the outcomes but not the claim: claim nothing for a while.

        Out of memory or read-only, the script was refused whole, before it ran:
        a new claim's slots go back. A resent claim stays unanswered (its first
        call may have run), and so does one refused for any other reason.
        """
        reason = refusal_of(exc)
        WORKER_WRITES_REFUSED.labels("claim", reason or "error").inc()
        if reason in ("out_of_memory", "read_only") and not resent:
            self._slots.give_back(wanted)
            if wanted:
                self._slots_returned()
        elif wanted:
            self._unanswered.append((token, wanted))
        pause_s = self._claim_refusals.failed(
            exc,
            what=f"queue {self.queue}: claim (outcomes still written)",
            why=describe(exc),
            logger=log,
        )
        self._claims_paused_until = time.monotonic() + pause_s
        self._maybe_ready = True  # claim again once the pause is over

    def _round_trip_failed(self, exc: BaseException, had_outcomes: bool, failures: Streak) -> float:
        """Count and log a failed round trip; returns how long to wait before the next.

        Whatever Redis said, the outcomes are kept and sent again: a terminal write
        is retried until it lands or is fenced out (an error no retry cures is a bug
        to be seen in the log, not an outcome to be dropped).
        """
        reason = refusal_of(exc)
        if had_outcomes:
            WORKER_WRITES_REFUSED.labels("finish", reason or "error").inc()
        return failures.failed(
            exc,
            what=f"queue {self.queue}: round trip (outcomes kept)",
            why=describe(exc),
            logger=log,
        )

    def _claim_to_send(self) -> tuple[str, int, bool]:
        """Token, slot count and resent-or-not of the next trip's claim: an unanswered one
        again, or new (at most :attr:`claim_max` slots).

        While claims are paused the trip claims nothing (count 0 only promotes retries).
        """
        if self._claims_paused():
            return new_claim_token(), 0, False
        if self._unanswered:
            token, wanted = self._unanswered.pop(0)
            return token, wanted, True
        if not self._wants_claim():
            return new_claim_token(), 0, False
        self._wakes_claimed = self._wakes
        return new_claim_token(), self._slots.reserve(self.claim_max), False

    def _wants_claim(self) -> bool:
        """Whether the next trip claims: there may be runs, room for them, and no claim in
        flight that already covers them (one is enough unless a backlog is known or a wake
        came after it was sent)."""
        if not (self._claiming and self._maybe_ready and self._slots.free > 0):
            return False
        return self._backlog or not self._claim_trips or self._wakes != self._wakes_claimed

    def _claims_paused(self) -> bool:
        return time.monotonic() < self._claims_paused_until

    def _wait_timeout(self) -> float:
        timeout = self._idle_wake_s
        if self._next_due_ms is not None:
            timeout = min(timeout, self._next_due_ms / 1000 - time.time())
        if self._claims_paused():
            timeout = min(timeout, self._claims_paused_until - time.monotonic())
        return max(MIN_WAIT_S, timeout)
