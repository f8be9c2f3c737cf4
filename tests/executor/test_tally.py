"""The worker's tally: per-run metrics reach Prometheus once per loop pass, totals unchanged."""

from __future__ import annotations

import asyncio

from app.executor.tally import Tally
from app.telemetry.metrics import ATTEMPT_SECONDS, RUNS_CLAIMED, RUNS_FINISHED, WORKER_REGISTRY


def _value(name: str, labels: dict[str, str]) -> float:
    return WORKER_REGISTRY.get_sample_value(name, labels) or 0.0


def test_counts_reach_the_metrics_at_the_end_of_the_loop_pass() -> None:
    run = {"queue": "tally-q", "handler": "tally.h"}
    done = {**run, "status": "succeeded"}
    claimed0 = _value("leasehold_runs_claimed_total", run)
    finished0 = _value("leasehold_runs_finished_total", done)
    count0 = _value("leasehold_run_attempt_seconds_count", done)
    bucket0 = _value("leasehold_run_attempt_seconds_bucket", {**done, "le": "0.005"})
    tally = Tally()

    async def batch() -> tuple[float, float]:
        for _ in range(3):
            tally.claimed("tally-q", "tally.h")
        tally.finished("tally-q", "tally.h", "succeeded", 0.001)
        tally.finished("tally-q", "tally.h", "succeeded", 2.0)
        before = _value("leasehold_runs_claimed_total", run)
        await asyncio.sleep(0)
        return before, _value("leasehold_runs_claimed_total", run)

    before, after = asyncio.run(batch())
    assert before == claimed0  # nothing before the pass ends
    assert after == claimed0 + 3
    assert _value("leasehold_runs_finished_total", done) == finished0 + 2
    assert _value("leasehold_run_attempt_seconds_count", done) == count0 + 2
    assert _value("leasehold_run_attempt_seconds_bucket", {**done, "le": "0.005"}) == bucket0 + 1
    assert RUNS_CLAIMED and RUNS_FINISHED and ATTEMPT_SECONDS


def test_counts_left_by_a_closed_loop_go_with_the_next_flush() -> None:
    run = {"queue": "tally-q2", "handler": "tally.h"}
    claimed0 = _value("leasehold_runs_claimed_total", run)
    tally = Tally()
    first = asyncio.new_event_loop()

    def claim() -> None:
        tally.claimed("tally-q2", "tally.h")  # its flush is scheduled on `first`...

    first.call_soon(claim)
    first.call_soon(first.stop)
    first.run_forever()
    first.close()  # ...which closes without running it
    assert _value("leasehold_runs_claimed_total", run) == claimed0

    async def again() -> None:
        tally.claimed("tally-q2", "tally.h")
        await asyncio.sleep(0)

    asyncio.run(again())
    assert _value("leasehold_runs_claimed_total", run) == claimed0 + 2
