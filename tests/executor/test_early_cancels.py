"""The worker's keep of cancel pushes that came before their run (pure logic, a fake clock)."""

from __future__ import annotations

from app.executor.early_cancels import EarlyCancels


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_push_applies_once_to_its_run_at_its_fence() -> None:
    kept = EarlyCancels(keep_s=5.0, clock=Clock())
    kept.keep("q.a", 3)
    assert not kept.take("q.b", 3)
    assert kept.take("q.a", 3)
    assert not kept.take("q.a", 3)  # taken: a later claim of the run is not cancelled


def test_a_push_for_another_fence_is_not_applied_and_is_dropped() -> None:
    kept = EarlyCancels(clock=Clock())
    kept.keep("q.a", 3)
    assert not kept.take("q.a", 4)  # another claim of the run (an earlier owner's push)
    assert len(kept) == 0


def test_a_push_expires_after_its_keep() -> None:
    clock = Clock()
    kept = EarlyCancels(keep_s=5.0, clock=clock)
    kept.keep("q.a", 1)
    clock.now += 5.01
    assert not kept.take("q.a", 1)
    kept.keep("q.b", 1)
    clock.now += 5.01
    kept.keep("q.c", 1)  # keeping drops what expired
    assert len(kept) == 1


def test_at_most_max_entries_are_kept_the_oldest_dropped_first() -> None:
    kept = EarlyCancels(max_entries=3, clock=Clock())
    for n in range(5):
        kept.keep(f"q.{n}", 1)
    assert len(kept) == 3
    assert not kept.take("q.0", 1) and not kept.take("q.1", 1)
    assert kept.take("q.4", 1)
