"""The claimable slots: the concurrency, plus a prefetch window that follows run durations."""

from __future__ import annotations

import asyncio

import pytest

from app.executor.slots import PREFETCH_WAIT_S, RunGate, Slots


def turn_over(slots: Slots, seconds: float) -> None:
    """As many runs end as the worker has slots, each after ``seconds``."""
    for _ in range(slots.capacity):
        slots.ran(seconds)


def test_a_fresh_worker_claims_only_its_concurrency_until_its_slots_turned_over() -> None:
    slots = Slots(4, prefetch_max=10)
    assert slots.reserve(100) == 4
    assert slots.free == 0
    for _ in range(3):
        slots.ran(0.0)
    assert slots.window == 0  # three short runs of four slots: not yet
    slots.ran(0.0)
    assert slots.window == 10


def test_short_runs_open_the_window_up_to_its_bound() -> None:
    slots = Slots(4, prefetch_max=10)
    turn_over(slots, 0.001)
    assert slots.window == 10
    assert slots.reserve(100) == 14


def test_the_window_holds_only_runs_that_would_start_within_the_wait_bound() -> None:
    slots = Slots(4, prefetch_max=100)
    turn_over(slots, PREFETCH_WAIT_S)  # a run lasts the bound: 4 slots free 4 in that time
    assert slots.window == 4
    slots.ran(100 * PREFETCH_WAIT_S)  # slow runs pull the average up: the window closes
    assert slots.window == 0


def test_a_closing_window_claims_nothing_until_held_runs_leave() -> None:
    slots = Slots(2, prefetch_max=2)
    turn_over(slots, 0.0)
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


async def test_the_run_gate_lets_capacity_in_and_the_rest_in_arrival_order() -> None:
    gate = RunGate(2)
    order: list[int] = []

    async def run(index: int) -> None:
        await gate.enter()
        order.append(index)

    await gate.enter()
    await gate.enter()
    waiting = [asyncio.create_task(run(index)) for index in range(3)]
    await asyncio.sleep(0)
    assert order == []  # full: all three wait
    for expected in ([0], [0, 1], [0, 1, 2]):
        gate.leave()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == expected
    await asyncio.gather(*waiting)


async def test_a_cancelled_waiter_takes_no_slot_and_a_handed_slot_is_passed_on() -> None:
    gate = RunGate(1)
    await gate.enter()
    gone = asyncio.create_task(gate.enter())
    handed = asyncio.create_task(gate.enter())
    last = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    gate.leave()  # skips the cancelled waiter: handed gets the slot...
    handed.cancel()  # ...and is cancelled before it resumed: the slot goes on to last
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(last, timeout=5)
    gate.leave()
    await asyncio.wait_for(gate.enter(), timeout=5)  # one slot, free again: nothing leaked


async def test_try_enter_takes_a_free_slot_but_never_one_a_waiter_is_owed() -> None:
    gate = RunGate(1)
    assert gate.try_enter()  # free: taken without waiting
    assert not gate.try_enter()  # full
    waiter = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    gate.leave()  # handed to the waiter...
    assert not gate.try_enter()  # ...so nobody jumps the line
    await asyncio.wait_for(waiter, timeout=5)
    gate.leave()
    assert gate.try_enter()
