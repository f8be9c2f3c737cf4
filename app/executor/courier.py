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
``SCRIPT_FLAGS`` in :mod:`app.store.lua.scripts`): the outcomes sent with a refused
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

**Hand-off** (``handoff_ms`` > 0, ``LEASEHOLD_HANDOFF``). A claim that comes back
short registers the worker for a hand-off (claim_runs) and keeps one of its slots
for it: the next create claims a run on the worker's behalf and pushes it to the
worker's inbox (:mod:`app.executor.inbox`), which hands it to
:meth:`Courier.take_handoff` and so to the same ``start_run`` as a claimed run.
One trip at a time carries the registration (removes it, and makes a new one when
short); the slot kept for it goes into that trip's claim. A row whose registration
was consumed just before such a removal finds no slot kept: it takes a free one, or
is released back to the queue, so the worker never holds more runs than slots. An
idle courier renews its registration at half its life (its timer's claim), so a
paused or dead worker stops being handed runs within ``handoff_ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from app.executor.slots import Slots
from app.retry import REDIS_BACKOFF, Streak
from app.store.leases.store import Claim, ClaimedRun, LeaseStore, Outcome, new_claim_token
from app.store.lua.transition import LeaseAnswer
from app.store.redis.refusals import describe, refusal_of
from app.telemetry.metrics import CLAIMS_THROTTLED, HANDOFFS, WORKER_WRITES_REFUSED

log = logging.getLogger(__name__)

MIN_WAIT_S = 0.01
# how long after a handed-off run started its worker registers again, when the run has
# not ended by then (its finish trip would carry the registration): runs created while
# it still runs are handed off too, and a short run's finish makes no extra trip
REREGISTER_S = 0.002
# how long a drain's withdrawal waits for a trip carrying the registration to come back
WITHDRAW_WAIT_S = 2.0

StartRun = Callable[[ClaimedRun, float], None]


@dataclass(frozen=True, slots=True)
class _Registration:
    """The hand-off registration as one trip carries it: whether the worker believed it
    was registered when the trip was sent (the trip's removal then settles its slot)."""

    had: bool
    # the slot kept for it, moved into the trip's claim (1), or given back (0)
    moved: int = 0


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
        handoff_ms: int = 0,
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
        # (token, reserved slots, registration) of claims sent without an answer coming
        # back, and not in flight again: each is resent by one trip
        self._unanswered: list[tuple[str, int, _Registration | None]] = []
        # the hand-off: how long a registration lives (0: off); whether one is believed
        # made; a trip carrying it is in flight (or unanswered); slots kept for it and
        # for rows on their way
        self._handoff_ms = handoff_ms
        self._registered = False
        self._registering = False
        self._handoff_slots = 0
        self._unregister = False  # a drain: one trip removes the registration
        self._registration_trip: asyncio.Task[None] | None = None
        # a handed-off run started: the registration is made again soon (see REREGISTER_S)
        self._reregister: asyncio.TimerHandle | None = None
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
        if self._reregister is not None:
            self._reregister.cancel()
        tasks = [*self._trips] + ([self._task] if self._task is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop_claiming(self) -> None:
        """Drain: keep writing outcomes, claim nothing more, take no more hand-offs."""
        self._claiming = False
        self._unregister = self._handoff_ms > 0
        self._kick.set()

    async def withdraw(self) -> None:
        """The end of a drain: remove the hand-off registration for sure, so no create
        leases a run to a worker that is going away (a trip that carries it is let
        finish first, for a short while)."""
        if not self._handoff_ms:
            return
        trip = self._registration_trip
        if trip is not None and not trip.done():
            await asyncio.wait([trip], timeout=WITHDRAW_WAIT_S)
        try:
            await self._store.claim(self.queue, self._owner_id, 0, handoff_ms=self._handoff_ms)
        except (RedisError, OSError) as exc:
            # it expires on its own; a run handed off meanwhile is a dead worker's run
            log.warning(
                "queue %s: could not withdraw the hand-off registration: %s", self.queue, exc
            )
        self._registered = False

    def take_handoff(self, run: ClaimedRun, read_at: float) -> None:
        """A create claimed ``run`` for this worker (its inbox row): start it like a
        claimed run, in the slot kept for the registration (else a free one).

        ``read_at``: when the read that brought it was sent (monotonic), the lease's
        confirmation time as a claim's send time is: the row was pushed after it, or
        (waiting already) within a round trip before it.

        Draining, or with no slot free, the run goes back to the queue (release_runs):
        the worker never holds more runs than it has slots.
        """
        HANDOFFS.labels(self.queue).inc()
        self._registered = False  # a hand-off consumes the registration
        self._maybe_ready = True  # the next trip claims (and registers again)
        if self._handoff_slots > 0:
            self._handoff_slots -= 1
            if self._claiming:
                self._start_handoff(run, read_at)
                return
            self._slots.give_back(1)
        elif self._claiming and self._slots.reserve(1) == 1:
            self._start_handoff(run, read_at)
            return
        task = asyncio.get_running_loop().create_task(self._give_back_handoff(run))
        self._trips.add(task)
        task.add_done_callback(self._trips.discard)

    def _start_handoff(self, run: ClaimedRun, read_at: float) -> None:
        """Start a handed-off run, and register again :data:`REREGISTER_S` later unless
        the run's finish trip did meanwhile: a worker with slots free stays registered
        while its runs execute, so the next create hands its run off too (not only
        once this one ended)."""
        self._start_run(run, read_at)
        if self._reregister is None:
            loop = asyncio.get_running_loop()
            self._reregister = loop.call_later(REREGISTER_S, self._register_again)

    def _register_again(self) -> None:
        """The timer of :meth:`_start_handoff`: a trip claims (and so registers) now, unless
        a registration is made or on its way, or the worker drains. Not a wake: the claim
        coming back short leaves the courier idle."""
        self._reregister = None
        if self._registered or self._registering or not self._claiming:
            return
        self._maybe_ready = True
        if self._task is None or self._task.done() or not self._send_trips():
            self._kick.set()

    async def _give_back_handoff(self, run: ClaimedRun) -> None:
        """Release a handed-off run this worker will not run (drain, or no slot free)."""
        try:
            await self._store.release([run.lease], "handoff_declined")
        except (RedisError, OSError) as exc:
            # its lease expires and the reconciler treats it as a dead worker's run
            log.warning("queue %s: could not give back a handed-off run: %s", self.queue, exc)

    def handoff_idle(self) -> None:
        """The inbox waited a full timeout for nothing: slots kept for rows that never
        came (a registration removed twice after a lost reply) are given back."""
        if self._registered or self._registering or self._handoff_slots == 0:
            return
        self._slots.give_back(self._handoff_slots)
        self._handoff_slots = 0
        self._slots_returned()

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
            token, wanted, resent, registration = self._claim_to_send()
            batch = self._outcomes
            if not batch and not wanted and registration is None:
                return sent
            self._outcomes = []
            trip = asyncio.get_running_loop().create_task(
                self._trip(batch, token, wanted, resent=resent, registration=registration)
            )
            self._trips.add(trip)
            if wanted:
                self._claim_trips.add(trip)
            if registration is not None:
                self._registration_trip = trip
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
        registration: _Registration | None = None,
    ) -> None:
        """One round trip: write ``batch``'s outcomes, claim ``wanted`` runs, settle both."""
        sent_at = time.monotonic()
        try:
            codes, claim = await self._store.finish_and_claim(
                self.queue,
                self._owner_id,
                [outcome for outcome, _ in batch],
                wanted,
                token,
                handoff_ms=self._handoff_ms if registration is not None else 0,
            )
        except (RedisError, OSError) as exc:
            # the claim may have run in Redis: its slots stay reserved for the resend
            # (and the registration it carried goes with it)
            if wanted or registration is not None:
                self._unanswered.append((token, wanted, registration))
            self._outcomes[:0] = batch
            # still in flight while it waits: no other trip is sent into the failure
            await asyncio.sleep(self._round_trip_failed(exc, bool(batch), self._failures))
            return
        self._failures.reset()
        for (_, future), code in zip(batch, codes, strict=True):
            if not future.done():
                future.set_result(code)
        if claim.refused is not None:
            self._claim_refused(
                token, wanted, claim.refused, resent=resent, registration=registration
            )
            return
        kept = 0 if registration is None else self._registration_answered(registration, claim)
        self._claim_answered(
            wanted, claim, sent_at, woken=self._wakes != self._wakes_claimed, kept=kept
        )

    def _registration_answered(self, registration: _Registration, claim: Claim) -> int:
        """Settle the slots of the hand-off registration a trip carried; returns how many
        of the claim's slots the new registration keeps (0 or 1).

        The slot kept for the registration the trip removed went into its claim when it
        was sent (:meth:`_take_registration`): if a hand-off consumed the registration
        meanwhile, its row takes a free slot when it comes, or goes back to the queue.
        """
        self._registering = False
        if not claim.registered:
            return 0
        self._handoff_slots += 1
        self._registered = True
        if not self._claiming:
            self._unregister = True  # made as a drain began: the next trip removes it
        return 1

    def _claim_answered(
        self, wanted: int, claim: Claim, sent_at: float, *, woken: bool, kept: int = 0
    ) -> None:
        """Start what the claim took; claim again only if the queue may still hold runs.

        A short claim says the queue was empty when the script ran, not that it is now:
        a wake message that came after the last new claim was sent (a run created just
        after the claim read the queue) keeps the courier claiming, else that run would
        wait for the ``idle_wake_s`` safety net. A full claim says more may wait: the
        trips in flight all claim until one comes back short. ``kept``: slots of the
        claim the hand-off registration it made keeps.
        """
        unused = wanted - len(claim.runs) - kept
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

    def _claim_refused(
        self,
        token: str,
        wanted: int,
        exc: Exception,
        *,
        resent: bool,
        registration: _Registration | None = None,
    ) -> None:
        """Redis took the outcomes but not the claim: claim nothing for a while.

        Out of memory or read-only, the script was refused whole, before it ran:
        a new claim's slots go back (and the registration it carried is as it was).
        A resent claim stays unanswered (its first call may have run), and so does
        one refused for any other reason.
        """
        reason = refusal_of(exc)
        WORKER_WRITES_REFUSED.labels("claim", reason or "error").inc()
        if reason in ("out_of_memory", "read_only") and not resent:
            moved = 0 if registration is None else registration.moved
            self._slots.give_back(wanted - moved)
            if wanted - moved:
                self._slots_returned()
            if registration is not None:  # refused whole: the registration is as it was
                self._registering = False
                self._registered = self._registered or registration.had
                self._handoff_slots += moved
        elif wanted or registration is not None:
            self._unanswered.append((token, wanted, registration))
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

    def _claim_to_send(self) -> tuple[str, int, bool, _Registration | None]:
        """Token, slot count, resent-or-not and hand-off registration of the next trip's
        claim: an unanswered one again, or new (at most :attr:`claim_max` slots).

        While claims are paused the trip claims nothing (count 0 only promotes retries).
        A new claim carries the registration when no other trip does (a drain's
        carries it with no claim, to remove it).
        """
        if self._claims_paused():
            return new_claim_token(), 0, False, None
        if self._unanswered:
            token, wanted, registration = self._unanswered.pop(0)
            return token, wanted, True, registration
        if self._unregister and not self._registering:
            self._unregister = False
            return new_claim_token(), 0, False, self._take_registration(into_claim=False)
        if not self._wants_claim():
            return new_claim_token(), 0, False, None
        self._wakes_claimed = self._wakes
        wanted = self._slots.reserve(self.claim_max)
        registration = None
        if self._handoff_ms and not self._registering and (wanted or self._registered):
            registration = self._take_registration(into_claim=True)
            wanted += registration.moved
        return new_claim_token(), wanted, False, registration

    def _take_registration(self, *, into_claim: bool) -> _Registration:
        """The registration, as the trip about to be sent carries it (one trip at a time).

        The slot kept for it goes into the trip's claim (``into_claim``: the claim
        removes the registration and may fill that slot) or back to the worker (a
        drain's trip, which claims nothing). Either way a row of a hand-off made before
        the removal finds no slot kept: it takes a free one, or goes back to the queue.
        """
        self._registering = True
        had, moved = self._registered, 0
        self._registered = False
        if had and self._handoff_slots > 0:
            self._handoff_slots -= 1
            if into_claim:
                moved = 1
            else:
                self._slots.give_back(1)
                self._slots_returned()
        return _Registration(had=had, moved=moved)

    def _wants_claim(self) -> bool:
        """Whether the next trip claims: there may be runs, room for them, and no claim in
        flight that already covers them (one is enough unless a backlog is known or a wake
        came after it was sent)."""
        room = self._slots.free > 0 or (self._registered and not self._registering)
        if not (self._claiming and self._maybe_ready and room):
            return False
        return self._backlog or not self._claim_trips or self._wakes != self._wakes_claimed

    def _claims_paused(self) -> bool:
        return time.monotonic() < self._claims_paused_until

    def _wait_timeout(self) -> float:
        timeout = self._idle_wake_s
        if self._registered:  # renewed at half its life, by the claim the timer sends
            timeout = min(timeout, self._handoff_ms / 2000)
        if self._next_due_ms is not None:
            timeout = min(timeout, self._next_due_ms / 1000 - time.time())
        if self._claims_paused():
            timeout = min(timeout, self._claims_paused_until - time.monotonic())
        return max(MIN_WAIT_S, timeout)
