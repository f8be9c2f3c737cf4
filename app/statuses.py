"""A run's statuses, without pydantic: what the CLI's options and help list.

``leasehold --help`` and every command's help build typer's whole command tree, whose
``--status`` options list :class:`RunStatus`'s values; with the enum in
:mod:`app.models` that cost the help pydantic and every model class (~100 ms of a
~250 ms ``--help``, issue 19: <= 300 ms). :mod:`app.models` still names all of these
(the same objects), so no importer needs to change.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is in its life; see DESIGN §3 for the state machine."""

    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    WAITING_HUMAN = "waiting_human"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ORPHANED = "orphaned"
    RECONCILIATION_REQUIRED = "reconciliation_required"
    EXPIRED = "expired"

    @property
    def is_terminal(self) -> bool:
        """Final states: nothing changes a run after it reaches one."""
        return self in TERMINAL_STATUSES

    @property
    def is_parked(self) -> bool:
        """States no executor touches until a person acts."""
        return self in PARKED_STATUSES

    @property
    def is_settled(self) -> bool:
        """Terminal or parked: what a waiting client stops waiting for."""
        return self.is_terminal or self.is_parked


TERMINAL_STATUSES = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.ORPHANED,
        RunStatus.EXPIRED,
    }
)
PARKED_STATUSES = frozenset({RunStatus.WAITING_HUMAN, RunStatus.RECONCILIATION_REQUIRED})
TERMINAL_EVENT_TYPES = frozenset(status.value for status in TERMINAL_STATUSES)
