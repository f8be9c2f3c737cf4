"""The handler test kit: a day's sleep, a signal and a person, in well under a second."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

import tests.support.kit_handlers  # noqa: F401 - kit.reminder, kit.patient
from app.errors import InvalidInput
from app.testing import TestStack


@pytest.fixture
async def stack(redis_url: str) -> AsyncIterator[TestStack]:
    async with TestStack(redis_url=redis_url) as running:
        yield running


async def test_a_day_s_sleep_then_a_signal_then_a_person_completes_without_waiting(
    stack: TestStack,
) -> None:
    started = time.monotonic()
    run_id = await stack.start("kit.reminder", {"user": "ann"})
    slept = await stack.settle(run_id)
    assert (slept.waiting_for or {}).get("kind") == "sleep"
    before = await stack.now_ms()
    await stack.advance(days=1)
    assert await stack.now_ms() - before >= 86_400_000
    signalled = await stack.settle(run_id)
    assert (signalled.waiting_for or {}).get("kind") == "signal"
    assert await stack.signal(run_id, "go", {"ok": True}) == "delivered"
    asked = await stack.settle(run_id)
    assert asked.status == "waiting_human"
    await stack.answer(run_id, "yes")
    done = await stack.settle(run_id)
    wall_s = time.monotonic() - started
    assert done.status == "succeeded", done.error
    assert done.output == {"go": {"ok": True}, "approved": "yes", "sent": "ann"}
    types = [event.type for event in await stack.events(run_id)]
    assert types[0] == "created" and types[-1] == "succeeded"
    assert types.count("wait") == 2 and "waiting_human" in types
    assert wall_s < 5, wall_s  # a generous bound for a loaded machine; ~0.1 s measured


async def test_a_signal_timeout_passes_when_the_clock_is_advanced(stack: TestStack) -> None:
    run_id = await stack.start("kit.patient", {"user": "bob"})
    await stack.settle(run_id)
    await stack.advance(minutes=59)
    assert (await stack.settle(run_id)).status == "waiting"
    await stack.advance(minutes=1)
    done = await stack.settle(run_id)
    assert (done.status, done.output) == ("succeeded", "SignalTimeout")


async def test_the_clock_only_moves_forward_and_input_is_checked_like_the_api(
    stack: TestStack,
) -> None:
    with pytest.raises(ValueError, match="forward"):
        await stack.advance(seconds=-1)
    with pytest.raises(InvalidInput):
        await stack.start("kit.reminder", {"nobody": 1})


async def test_its_own_embedded_redis_starts_and_stops() -> None:
    """Without redis_url the kit starts its own server (what a user's CI gets)."""
    async with TestStack() as stack:
        run_id = await stack.start("kit.patient", {"user": "c"})
        await stack.settle(run_id)
        await stack.signal(run_id, "go")
        assert (await stack.settle(run_id)).output == "signalled"
