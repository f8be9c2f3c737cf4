"""The retry backoff for handler errors: exponential, jittered, capped (pure logic)."""

from __future__ import annotations

import pytest

from app.errors import BudgetExceeded, HandlerFailed, OperationIntervened, RunFailure
from app.executor.execution import RetryPolicy

SAMPLES = 200


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_each_delay_is_jittered_within_half_to_all_of_its_doubling_ceiling(attempt: int) -> None:
    policy = RetryPolicy(backoff_s=1.0, backoff_max_s=60.0)
    ceiling_ms = 1000 * 2 ** (attempt - 1)
    delays = {policy.delay_ms(attempt) for _ in range(SAMPLES)}
    assert all(ceiling_ms / 2 <= delay <= ceiling_ms for delay in delays)
    assert len(delays) > 1, "no jitter"


def test_delays_never_shrink_from_one_attempt_to_the_next() -> None:
    policy = RetryPolicy(backoff_s=0.5, backoff_max_s=60.0)
    for attempt in range(1, 6):
        longest = max(policy.delay_ms(attempt) for _ in range(SAMPLES))
        shortest_next = min(policy.delay_ms(attempt + 1) for _ in range(SAMPLES))
        assert shortest_next >= longest


def test_the_delay_is_capped() -> None:
    policy = RetryPolicy(backoff_s=1.0, backoff_max_s=5.0)
    assert all(policy.delay_ms(30) <= 5000 for _ in range(SAMPLES))


def test_untyped_handler_errors_are_retryable_and_watchdog_and_budget_errors_are_not() -> None:
    assert HandlerFailed("boom").retryable
    assert not RunFailure("typed").retryable
    assert not BudgetExceeded("out of time").retryable
    assert not OperationIntervened("stopped").retryable
