"""The claimable slots: the concurrency, plus a prefetch window that follows run durations."""

from __future__ import annotations

from app.executor.slots import PREFETCH_WAIT_S, Slots


def test_a_fresh_worker_claims_only_its_concurrency() -> None:
    slots = Slots(4, prefetch_max=10)
    assert slots.reserve(100) == 4
    assert slots.free == 0


def test_short_runs_open_the_window_up_to_its_bound() -> None:
    slots = Slots(4, prefetch_max=10)
    slots.ran(0.001)
    assert slots.window == 10
    assert slots.reserve(100) == 14


def test_the_window_holds_only_runs_that_would_start_within_the_wait_bound() -> None:
    slots = Slots(4, prefetch_max=100)
    slots.ran(PREFETCH_WAIT_S)  # a run lasts the bound: 4 slots free 4 runs in that time
    assert slots.window == 4
    slots.ran(100 * PREFETCH_WAIT_S)  # slow runs pull the average up: the window closes
    assert slots.window == 0


def test_a_closing_window_claims_nothing_until_held_runs_leave() -> None:
    slots = Slots(2, prefetch_max=2)
    slots.ran(0.0)
    assert slots.reserve(10) == 4
    for _ in range(50):
        slots.ran(10.0)
    assert slots.window == 0
    assert slots.free == 0
    slots.give_back(2)
    assert slots.free == 0  # 2 still held: the concurrency, nothing beyond
    slots.give_back(1)
    assert slots.free == 1


def test_prefetch_off_keeps_the_concurrency_whatever_the_durations() -> None:
    slots = Slots(3, prefetch_max=0)
    slots.ran(0.0)
    assert slots.reserve(10) == 3
    slots.give_back(-5)  # nothing negative is given back
    assert slots.busy == 3
