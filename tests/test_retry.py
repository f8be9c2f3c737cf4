"""The one retry policy (app/retry.py): full jitter, doubling ceilings, what is retried.

Pure logic: no Redis. What a retry loop does against a real Redis is tested
where the loop lives (the event flusher, the courier, the client).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random

import pytest
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from app.retry import REDIS_BACKOFF, Backoff, retrying
from app.store.redis.refusals import describe, is_transient, refusal_of

SAMPLES = 2_000


def test_delays_spread_over_the_whole_window_below_each_ceiling() -> None:
    backoff = Backoff(first_s=0.1, max_s=10.0)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8)]:
        delays = [backoff.delay_s(failures) for _ in range(SAMPLES)]
        assert all(0 <= delay <= ceiling for delay in delays)
        # full jitter: as likely near zero as near the ceiling (lockstep would be one value)
        assert min(delays) < 0.05 * ceiling
        assert max(delays) > 0.95 * ceiling
        assert 0.4 * ceiling < sum(delays) / len(delays) < 0.6 * ceiling


def test_the_ceiling_doubles_up_to_the_cap_and_a_huge_count_does_not_overflow() -> None:
    backoff = Backoff(first_s=0.05, max_s=2.0)
    assert [backoff.ceiling_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert backoff.ceiling_s(10**9) == 2.0
    assert backoff.delay_s(10**9) <= 2.0


def test_a_floor_keeps_that_share_of_the_ceiling() -> None:
    backoff = Backoff(first_s=1.0, max_s=60.0, floor=0.5)
    delays = [backoff.delay_s(3) for _ in range(SAMPLES)]
    assert all(2.0 <= delay <= 4.0 for delay in delays)


def test_two_streaks_draw_different_delays_and_a_seed_repeats_them() -> None:
    def delays(rng: random.Random | None) -> list[float]:
        streak = REDIS_BACKOFF.streak(rng)
        return [streak.next_delay_s() for _ in range(6)]

    assert delays(None) != delays(None)  # two workers after one Redis restart
    assert delays(random.Random(7)) == delays(random.Random(7))


def test_a_success_starts_the_next_outage_from_the_first_delay() -> None:
    streak = Backoff(first_s=0.05, max_s=2.0).streak()
    for _ in range(10):
        streak.next_delay_s()
    assert streak.failures == 10
    streak.reset()
    assert streak.next_delay_s() <= 0.05


@pytest.mark.parametrize(
    "fields",
    [
        {"first_s": -1.0, "max_s": 1.0},
        {"first_s": 0.1, "max_s": math.inf},
        {"first_s": math.nan, "max_s": 1.0},
        {"first_s": 0.1, "max_s": 1.0, "floor": 1.5},
        {"first_s": 0.1, "max_s": 1.0, "floor": -0.1},
    ],
)
def test_a_backoff_that_could_never_wait_sanely_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**fields)


@pytest.mark.parametrize(
    "exc",
    [
        ReadOnlyError("You can't write against a read only replica."),
        MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        ClusterDownError("The cluster is down"),
        TryAgainError("Multiple keys request during rehashing of slot"),
        ResponseError("UNBLOCKED force unblock from blocking operation, instance state changed"),
        OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        RedisConnectionError("Connection reset by peer"),
        ConnectionRefusedError(111, "Connection refused"),
    ],
    ids=["readonly", "masterdown", "clusterdown", "tryagain", "unblocked", "oom", "reset", "os"],
)
def test_failover_replies_are_transient(exc: Exception) -> None:
    assert is_transient(exc)
    assert not describe(exc).startswith("not transient")


def test_a_reply_no_wait_cures_is_not_transient() -> None:
    exc = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert refusal_of(exc) is None
    assert not is_transient(exc)
    assert describe(exc) == "not transient: ResponseError"


class Flaky:
    """An operation that fails with each of ``failures`` in turn, then answers."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


FAST = Backoff(first_s=0.001, max_s=0.01)


async def test_transient_failures_are_retried_and_each_retry_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    op = Flaky(ReadOnlyError("READONLY"), RedisConnectionError("reset"))
    with caplog.at_level(logging.WARNING, logger="app.retry"):
        answer = await retrying(
            op, transient=is_transient, what="a write", backoff=FAST, describe=describe
        )
    assert (answer, op.calls) == ("done", 3)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("a write failed (Redis is read-only")
    assert "retrying in" in lines[0]


async def test_a_failure_no_retry_cures_is_raised_at_once() -> None:
    op = Flaky(ResponseError("ERR bad script"))
    with pytest.raises(ResponseError):
        await retrying(op, transient=is_transient, what="a write", backoff=FAST)
    assert op.calls == 1


async def test_cancelling_the_task_ends_its_retries() -> None:
    op = Flaky(*[RedisConnectionError("down")] * 1_000)
    slow = Backoff(first_s=60.0, max_s=60.0, floor=1.0)  # the first wait is a minute
    task = asyncio.create_task(retrying(op, transient=is_transient, what="w", backoff=slow))
    await asyncio.sleep(0.05)  # the first call failed; the task now waits its minute
    assert op.calls == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert op.calls == 1


def test_a_repeating_failure_is_one_line_per_interval_saying_how_many_were_held_back(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("app.retry.time.monotonic", lambda: clock[0])
    streak = Backoff(first_s=0.001, max_s=0.01, log_every_s=10.0).streak()
    with caplog.at_level(logging.WARNING, logger="app.retry"):
        for _ in range(40):  # 40 failures in 4 s: the first is said at once
            streak.failed(ReadOnlyError("READONLY"), what="a write")
            clock[0] += 0.1
        streak.reset()  # a success in between does not make the loop a new voice
        clock[0] += 6.0
        streak.failed(ReadOnlyError("READONLY"), what="a write")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert "more like it" not in lines[0]
    assert lines[1].endswith("(39 more like it in the last 10s)"), lines[1]
