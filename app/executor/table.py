"""The worker's table of held leases, shared by the event loop and the heartbeat.

The event loop adds a run when it is claimed and removes it once its terminal
write (or release) is settled; the heartbeat thread reads a snapshot to renew
and records when each lease was last confirmed by Redis. A lock guards the
map; entries are small and the critical sections never do I/O.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from app.store.leases.store import Lease


@dataclass
class LeaseEntry:
    """One held :class:`Lease`; ``confirmed_at`` is monotonic time of the last confirmation.

    Confirmation times are taken *before* the call that confirmed the lease was
    sent, so the local jeopardy deadline can only be early, never late.
    """

    lease: Lease
    confirmed_at: float


class LeaseTable:
    """Thread-safe map of run id to :class:`LeaseEntry`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, LeaseEntry] = {}

    def add(self, lease: Lease, confirmed_at: float) -> None:
        """Start tracking a lease the worker just obtained."""
        with self._lock:
            self._entries[lease.run_id] = LeaseEntry(lease, confirmed_at)

    def remove(self, run_id: str) -> None:
        """Stop tracking a lease (terminal write settled, released, or lost)."""
        with self._lock:
            self._entries.pop(run_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def snapshot(self) -> dict[str, list[Lease]]:
        """Every held lease grouped by queue, for one renewal round."""
        grouped: dict[str, list[Lease]] = defaultdict(list)
        with self._lock:
            for entry in self._entries.values():
                grouped[entry.lease.queue].append(entry.lease)
        return dict(grouped)

    def confirm(self, run_ids: list[str], at: float) -> None:
        """Record that Redis renewed these leases in a call sent at monotonic ``at``."""
        with self._lock:
            for run_id in run_ids:
                entry = self._entries.get(run_id)
                if entry is not None and entry.confirmed_at < at:
                    entry.confirmed_at = at

    def in_jeopardy(self, deadline_s: float, now: float | None = None) -> list[str]:
        """Runs whose last confirmation is older than ``deadline_s`` seconds."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return [
                entry.lease.run_id
                for entry in self._entries.values()
                if now - entry.confirmed_at > deadline_s
            ]

    def earliest_confirmation(self) -> float | None:
        """The oldest confirmation time of any lease, to schedule the jeopardy check."""
        with self._lock:
            return min((entry.confirmed_at for entry in self._entries.values()), default=None)
