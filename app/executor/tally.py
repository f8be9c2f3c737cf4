"""A worker's per-run metrics, counted in plain dicts and added to Prometheus once per loop pass.

Each claimed and each finished run bumped two or three prometheus-client children of
its own (a lock, an observability check and an exemplar check per call, ~6 % of a
worker's Python per no-op run). A batch's runs are claimed in one loop pass and settle
in one other (they share a claim's reply and a finish's reply), so here each is counted
in a dict, and the first count of a pass schedules one :meth:`Tally.flush` at the end
of it (``call_soon``): the same totals, labels and histogram observations reach
``/metrics``, one ``inc`` per label set and batch, within the same loop pass.

One tally per worker, used only on its event loop's thread.
"""

from __future__ import annotations

import asyncio

from app.telemetry.metrics import ATTEMPT_SECONDS, RUNS_CLAIMED, RUNS_FINISHED, child


class Tally:
    """Counts of claimed and finished runs not yet added to their metrics."""

    def __init__(self) -> None:
        self._claimed: dict[tuple[str, str], int] = {}
        # (queue, handler, status): each attempt's duration, in seconds
        self._finished: dict[tuple[str, str, str], list[float]] = {}
        # the loop a flush is scheduled on (None: none is): a loop that closed before
        # running it leaves the counts to the next loop's flush
        self._flush_on: asyncio.AbstractEventLoop | None = None

    def claimed(self, queue: str, handler: str) -> None:
        """One run claimed (``leasehold_runs_claimed_total``)."""
        key = (queue, handler)
        self._claimed[key] = self._claimed.get(key, 0) + 1
        self._schedule()

    def finished(self, queue: str, handler: str, status: str, seconds: float) -> None:
        """One outcome written (``leasehold_runs_finished_total``) after an attempt of
        ``seconds`` (``leasehold_run_attempt_seconds``, observed without an exemplar)."""
        key = (queue, handler, status)
        durations = self._finished.get(key)
        if durations is None:
            self._finished[key] = [seconds]
        else:
            durations.append(seconds)
        self._schedule()

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        if self._flush_on is not loop:
            self._flush_on = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Add every count so far to its metric."""
        self._flush_on = None
        claimed, self._claimed = self._claimed, {}
        finished, self._finished = self._finished, {}
        for (queue, handler), count in claimed.items():
            child(RUNS_CLAIMED, queue, handler).inc(count)
        for labels, durations in finished.items():
            child(RUNS_FINISHED, *labels).inc(len(durations))
            histogram = child(ATTEMPT_SECONDS, *labels)
            for seconds in durations:
                histogram.observe(seconds)
