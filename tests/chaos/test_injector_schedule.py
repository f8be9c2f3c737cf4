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
    pending_seen: list[bool] = []
    act = injector._actions[FaultKind.PAUSE_WORKER]

    async def act_then_look(fault: Fault) -> None:
        await act(fault)
        pending_seen.append(injector.first_pending)

    injector._actions = {kind: act_then_look for kind in FaultKind}
    # the deadline is already near: on a loaded machine the first faults run late
    await injector.run(list(FaultKind), until=time.monotonic() + 0.01, first=first)
    assert done == first
    assert pending_seen == [True, True, False]  # the workload was told to keep going
    assert not injector.first_pending


async def test_no_random_fault_is_added_past_the_deadline() -> None:
    injector, done = _injector(action_s=0.0)
    await injector.run([FaultKind.KILL_WORKER], until=time.monotonic() - 1, first=[])
    assert done == []
