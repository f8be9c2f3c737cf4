"""Why a worker stops a run it executes: one enum instead of bare strings.

The reason is what ``ctx.cancel_reason`` tells a handler, what the attempt's span
records, and what decides how the run leaves the worker (see
:mod:`app.executor.execution`): some reasons abandon it without a write.
"""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    """Why a run's handler was interrupted (values are what handlers and logs see)."""

    CANCEL_REQUESTED = "cancel_requested"  # a client cancelled it
    LEASE_LOST = "lease_lost"  # Redis answered LOST: another owner holds it
    JEOPARDY = "jeopardy"  # renewals failed for too long: it may be taken over
    DRAIN = "drain"  # the worker is draining: the run is released to the queue
    RECONCILIATION_REQUIRED = "reconciliation_required"  # parked for a person
    RUN_DURATION = "run_duration_exceeded"  # its max_duration_s budget ran out
    PARKED = "parked"  # a durable wait parked it (app/executor/waits.py): the lease is given back

    @property
    def abandons(self) -> bool:
        """True when the owner must write nothing more: it no longer holds the run."""
        return self in _ABANDONING


_ABANDONING = frozenset(
    {
        StopReason.LEASE_LOST,
        StopReason.JEOPARDY,
        StopReason.RECONCILIATION_REQUIRED,
        StopReason.PARKED,
    }
)


# here, beside the reasons, so the worker's execution catches it without importing the
# waits' modules (effects, events, the wait store) before its first claim (issue 19 aim 2)
class RunParked(BaseException):
    """Unwinds a handler whose run was just parked, or found cancelling, by its own wait.

    A BaseException, so a handler's ``except Exception`` cannot swallow it and carry
    on without a lease. The worker catches it; handlers must let it through.
    """
