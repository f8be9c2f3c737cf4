"""Poll for an outcome instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.models import Run, RunStatus
from app.store.runs.store import RunStore

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], bool],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``probe`` until ``until(result)`` holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if until(last):
            return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")


async def wait_status(
    store: RunStore, run_id: str, *statuses: RunStatus, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Run:
    """Poll the run until it is in one of ``statuses``."""
    return await eventually(
        lambda: store.get(run_id),
        until=lambda run: run.status in statuses,
        timeout_s=timeout_s,
        what=f"{run_id} to be {[status.value for status in statuses]}",
    )


def owner_pid(run: Run) -> int:
    """The pid in an owner id ``w-<host>-<pid>-<random>``."""
    assert run.owner_id is not None
    return int(run.owner_id.rsplit("-", 2)[1])
