"""The injector's schedule: the faults a run promised are all tried, however late."""

from __future__ import annotations

import asyncio
import random
import time
from types import SimpleNamespace
from typing import Any

from tools.chaos.faults import Fault, FaultKind, Injector


def _injector(action_s: float) -> tuple[Injector, list[FaultKind]]:
    """An injector over a stand-in cluster whose every fault takes ``action_s``."""
    cluster: Any = SimpleNamespace(
        config=SimpleNamespace(lease_ttl_s=1.0),
        workers=[SimpleNamespace(index=0)],
        apis=[SimpleNamespace(index=0)],
    )
    injector = Injector(cluster, redis_client=None, rng=random.Random(1))  # type: ignore[arg-type]
    injector.rng.uniform = lambda a, b: 0.0  # type: ignore[method-assign]
    done: list[FaultKind] = []

    async def act(fault: Fault) -> None:
        await asyncio.sleep(action_s)
        done.append(fault.kind)

    injector._actions = {kind: act for kind in FaultKind}
    return injector, done


async def test_every_first_fault_is_injected_even_past_the_deadline() -> None:
    injector, done = _injector(action_s=0.05)
    first = [FaultKind.PAUSE_WORKER, FaultKind.KILL_WORKER, FaultKind.KILL_API]
    # the deadline is already near: on a loaded machine the first faults run late
    pending_seen: list[bool] = []

    async def watch() -> None:
        while not done:
            await asyncio.sleep(0.01)
        pending_seen.append(injector.first_pending)

    await asyncio.gather(
        injector.run(list(FaultKind), until=time.monotonic() + 0.01, first=first), watch()
    )
    assert done == first
    assert pending_seen == [True]
    assert not injector.first_pending


async def test_no_random_fault_is_added_past_the_deadline() -> None:
    injector, done = _injector(action_s=0.0)
    await injector.run([FaultKind.KILL_WORKER], until=time.monotonic() - 1, first=[])
    assert done == []
