"""Concurrency slots: how many more runs this worker may start.

Claims reserve slots *before* the round trip, so two queues' claims in flight
at once can never start more runs than the concurrency limit.
"""

from __future__ import annotations

import asyncio


class Slots:
    """A counter of free run slots with an event for "at least one is free"."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._available = asyncio.Event()
        self._available.set()

    @property
    def free(self) -> int:
        """Slots not reserved by a claim nor held by a running handler."""
        return self._free

    @property
    def busy(self) -> int:
        """Slots in use (running handlers plus claims in flight)."""
        return self.capacity - self._free

    def reserve(self, wanted: int) -> int:
        """Take up to ``wanted`` slots; returns how many were taken."""
        taken = min(wanted, self._free)
        self._free -= taken
        if self._free == 0:
            self._available.clear()
        return taken

    def give_back(self, count: int = 1) -> None:
        """Return slots (a handler finished, or a claim got fewer runs than reserved)."""
        if count <= 0:
            return
        self._free = min(self.capacity, self._free + count)
        self._available.set()

    async def wait_available(self) -> None:
        """Wait until at least one slot is free."""
        await self._available.wait()
