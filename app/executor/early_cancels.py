"""Cancel pushes that came before their run: kept briefly, applied when it registers.

A claim's script makes the run ``running`` under this worker in Redis before its
reply reaches the worker; a client's cancel in between is published at once (the
run's fence in it), and the listener's connection may deliver that push before the
claim's reply is read. Dropped, the cancel would wait for the next renewal (TTL/3)
to reach the run. So a push for a run the worker does not hold is kept, run id ->
fence, for ``keep_s``, and the worker applies it when a run of that id and fence
registers: claimed or handed to it, through the one entry point both use.

Bounded: every worker of a queue hears every cancel of the queue, most for runs
other workers hold, so at most ``max_entries`` are kept, the oldest dropped first;
a run's cancel is also in its record, and its renewal answers CANCEL whatever is
kept here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

KEEP_S = 5.0  # far longer than a claim's reply takes to be read, even on a loaded host
MAX_ENTRIES = 1024


class EarlyCancels:
    """Pushes for runs not registered (yet): run id -> (fence, monotonic expiry)."""

    def __init__(
        self,
        *,
        keep_s: float = KEEP_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keep_s = keep_s
        self._max = max_entries
        self._clock = clock
        self._kept: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, run_id: str, fence: int) -> None:
        """Keep a push for ``run_id`` at ``fence``; the oldest (or expired) go first."""
        now = self._clock()
        self._expire(now)
        self._kept.pop(run_id, None)  # a newer push moves it to the young end
        self._kept[run_id] = (fence, now + self._keep_s)
        while len(self._kept) > self._max:
            self._kept.popitem(last=False)

    def take(self, run_id: str, fence: int) -> bool:
        """Whether a push kept for ``run_id`` names ``fence`` and has not expired.

        Removes what is kept for ``run_id`` either way: a push for another fence was
        for another claim of the run (an earlier owner's, or a later one's).
        """
        if not self._kept:
            return False  # the common case: nothing kept, one check
        kept = self._kept.pop(run_id, None)
        return kept is not None and kept[0] == fence and kept[1] > self._clock()

    def _expire(self, now: float) -> None:
        while self._kept:
            run_id, (_, expires) = next(iter(self._kept.items()))
            if expires > now:
                return
            del self._kept[run_id]
