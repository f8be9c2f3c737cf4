"""One retry policy: how every loop that waits for Redis (or the API) to come back waits.

A failed call is tried again after a delay drawn with *full jitter*: uniformly
from ``[0, ceiling]``, the ceiling doubling with each consecutive failure from
``first_s`` up to ``max_s``. Without jitter, the 1,000 followers or workers that
lost Redis (or the API) at the same moment all come back at the same moment,
and again at every doubling: a restart is followed by waves of reconnects.
Spread over the whole window, they arrive as a trickle. The mean wait is half
the ceiling, so a cap of 2 s waits about as long on average as a fixed 1 s.

What counts as *transient* is not decided here but by one predicate per kind of
peer, passed in: :func:`app.store.redis.refusals.is_transient` for Redis (a dropped
connection, a timeout, a failover's ``READONLY``/``MASTERDOWN``/``CLUSTERDOWN``,
out of memory), the client's for HTTP (a dropped connection, 502/503/504). So
this module imports nothing of the product, and the HTTP client uses it
without Redis.

Two shapes use the policy:

* :func:`retrying` awaits one call until it returns, retrying transient
  failures and raising any other (an effect record, a checkpoint, loading the
  scripts at start-up);
* a :class:`Streak` is the failure count of a long-lived loop that does its own
  bookkeeping between attempts (the courier puts its batch back, the event
  flusher its events, a listener resubscribes) and resets after a success.

A loop that fails for a long time (Redis at maxmemory refuses every write for as
long as it stays full) logs its first failure at once and then at most one line per
``log_every_s`` of its policy, saying how many it held back (:class:`RepeatLog`): a
worker at maxmemory logged ~40-90 warnings a second before (issue 35).

Cancelling a task cancels its wait: :class:`asyncio.CancelledError` is not an
:class:`Exception`, so no retry ever swallows it. A write that must outlive
its caller's cancellation (a terminal write, an effect's result) is shielded
by that caller, and then retries until it lands or is fenced out.

Written here rather than taken from tenacity or stamina: five of the eight
loops are not "call this until it succeeds" but keep state across failures
and reset after a success, which those libraries would serve only through a
new retry object per streak and hooks for the bookkeeping; what is left is
a dozen lines, not worth a dependency in the worker and in the client.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
TransientCheck = Callable[[BaseException], bool]

log = logging.getLogger(__name__)

# 2**62 times any sane first delay is far past any cap; bounds the float arithmetic
_MAX_DOUBLINGS = 62


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: the delay before a retry after ``failures`` failures.

    ``floor`` is the share of the ceiling every delay keeps: 0 (the default) is
    full jitter; the handler-retry policy keeps half (equal jitter), so that a
    failed run is never retried at once. A cap below the first delay caps it.
    Raises ``ValueError`` for a negative or non-finite delay, or a floor outside
    [0, 1].
    """

    first_s: float
    max_s: float
    floor: float = 0.0
    # a streak's failures are logged at most once per this long (0: each one)
    log_every_s: float = 0.0

    def __post_init__(self) -> None:
        if not all(0 <= value < math.inf for value in (self.first_s, self.max_s, self.log_every_s)):
            raise ValueError(f"backoff delays must be finite and not negative, not {self}")
        if not 0 <= self.floor <= 1:
            raise ValueError(f"backoff floor must be within [0, 1], not {self.floor}")

    def ceiling_s(self, failures: int) -> float:
        """The longest delay after ``failures`` consecutive failures (1 for the first)."""
        doublings = min(max(0, failures - 1), _MAX_DOUBLINGS)
        return min(self.max_s, self.first_s * 2.0**doublings)

    def delay_s(self, failures: int, rng: random.Random | None = None) -> float:
        """A delay drawn within ``[floor * ceiling, ceiling]`` (``rng`` to make it repeatable)."""
        ceiling = self.ceiling_s(failures)
        return (rng or _RANDOM).uniform(ceiling * self.floor, ceiling)

    def streak(self, rng: random.Random | None = None) -> Streak:
        """A fresh failure count for one loop."""
        return Streak(self, rng)


_RANDOM = random.Random()

# how often a loop that keeps failing against Redis says so, after its first failure
REPEAT_LOG_EVERY_S = 10.0
# every loop that waits for Redis: 50 ms after the first failure, up to 2 s (1 s on average)
REDIS_BACKOFF = Backoff(first_s=0.05, max_s=2.0, log_every_s=REPEAT_LOG_EVERY_S)
# a follower waiting for the API (a restart, Redis away behind it): up to 5 s
API_BACKOFF = Backoff(first_s=0.2, max_s=5.0)


class RepeatLog:
    """One loop's failure lines: the first at once, then at most one per ``every_s``.

    The lines held back in between are counted, and the next line that goes out
    says how many there were, so a loop that fails 40 times a second writes one
    line every ``every_s`` instead. ``every_s`` 0 logs every line. Not reset by a
    success: a loop that fails, succeeds and fails again in turn is still one voice.
    """

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.held_back = 0
        self._logged_at = -math.inf

    def log(
        self,
        logger: logging.Logger,
        level: int,
        msg: str,
        *args: object,
        extra: Mapping[str, Any] | None = None,
    ) -> bool:
        """Log ``msg % args`` unless a line went out less than ``every_s`` ago; whether it did."""
        now = time.monotonic()
        if now - self._logged_at < self.every_s:
            self.held_back += 1
            return False
        if self.held_back:
            msg += " (%d more like it in the last %.0fs)"
            args = (*args, self.held_back, now - self._logged_at)
        self._logged_at, self.held_back = now, 0
        logger.log(level, msg, *args, extra=extra)
        return True


class Streak:
    """The consecutive failures of one loop: each waits longer, up to the cap; a success resets."""

    def __init__(self, backoff: Backoff, rng: random.Random | None = None) -> None:
        self.backoff = backoff
        self._rng = rng
        self.failures = 0
        self._lines = RepeatLog(backoff.log_every_s)

    def next_delay_s(self) -> float:
        """Count one more failure and draw the delay before the next attempt."""
        self.failures += 1
        return self.backoff.delay_s(self.failures, self._rng)

    def failed(
        self,
        exc: BaseException,
        *,
        what: str,
        why: str | None = None,
        logger: logging.Logger = log,
        level: int = logging.WARNING,
        extra: Mapping[str, Any] | None = None,
    ) -> float:
        """Count a failure of ``what``, log it with the delay drawn, and return that delay.

        ``why`` is the failure in words (the exception's type name by default);
        ``level`` is lower in a library (the client), whose user decides what to see.
        Logged at most once per the policy's ``log_every_s`` (:class:`RepeatLog`).
        """
        delay = self.next_delay_s()
        why = why or type(exc).__name__
        self._lines.log(
            logger,
            level,
            "%s failed (%s), retrying in %.2fs: %s",
            what,
            why,
            delay,
            exc,
            extra=extra,
        )
        return delay

    async def wait(
        self,
        exc: BaseException,
        *,
        what: str,
        why: str | None = None,
        logger: logging.Logger = log,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """:meth:`failed`, then sleep that delay (cancelling the task ends the wait)."""
        # here, not at the top: a loop that awaits this has imported asyncio already, and
        # `leasehold runs get` (sync, through app.client) need not (~10-25 ms of its start)
        import asyncio

        await asyncio.sleep(self.failed(exc, what=what, why=why, logger=logger, extra=extra))

    def reset(self) -> None:
        """A success: the next failure starts again from the first delay."""
        self.failures = 0


async def retrying(
    op: Callable[[], Awaitable[T]],
    *,
    transient: TransientCheck,
    what: str,
    backoff: Backoff,
    describe: Callable[[BaseException], str] | None = None,
    logger: logging.Logger = log,
    extra: Mapping[str, Any] | None = None,
) -> T:
    """Await ``op()`` until it returns; a transient failure waits and tries again.

    Each retry is logged (``what`` names the call, ``describe`` puts the failure
    in words). Raises the first failure
    ``transient`` rejects, unchanged; never gives up on a transient one, so a
    caller that needs a deadline cancels the task (or wraps it in a timeout).
    ``op`` must be safe to repeat: it may have run in Redis before its reply
    was lost.
    """
    streak = backoff.streak()
    while True:
        try:
            return await op()
        except Exception as exc:
            if not transient(exc):
                raise
            why = describe(exc) if describe else None
            await streak.wait(exc, what=what, why=why, logger=logger, extra=extra)
