"""The drain's closing line counts what happened: finished, released, prefetched.

A prefetched run is released at the drain's start; its release used to be written before
the drain's wait ended, so it left the table and was counted "finished" beside its own
"run released" line (issue 37: "run released: OK" then "drained: 1 finished, 0 released").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from app.executor.drain import drain
from app.executor.execution import RunExecution


class FakeExecution:
    """A run in the worker's table: leaves it when stopped (released) or when it ends."""

    def __init__(self, table: dict[str, Any], run_id: str, *, started: bool) -> None:
        self.table, self.run_id, self.started = table, run_id, started
        self.left = asyncio.Event()
        self.task = asyncio.create_task(self.left.wait())  # what the drain waits on
        table[run_id] = self

    def stop(self, reason: object) -> None:
        """Released: its release is written a moment later, and it leaves the table."""
        asyncio.get_running_loop().call_soon(self.end)

    def end(self) -> None:
        self.table.pop(self.run_id, None)
        self.left.set()


class FakeCourier:
    def stop_claiming(self) -> None:
        pass

    async def withdraw(self) -> None:
        pass


async def test_a_prefetched_run_is_counted_released_not_finished(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table: dict[str, Any] = {}
    FakeExecution(table, "prefetched", started=False)
    quick = FakeExecution(table, "quick", started=True)
    FakeExecution(table, "slow", started=True)
    asyncio.get_running_loop().call_later(0.01, quick.end)
    with caplog.at_level(logging.INFO, logger="app.executor.worker"):
        await drain(cast(dict[str, RunExecution], table), [FakeCourier()], timeout_s=0.2)  # type: ignore[list-item]
    assert table == {}
    assert "drain: run quick finished" in caplog.text
    assert "drain: run prefetched finished" not in caplog.text
    assert "drained: 1 finished, 2 released (1 of them prefetched, never started)" in caplog.text
