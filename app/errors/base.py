"""The root of the tree and the errors of no room: a setting, an API answer, a process's cap."""

from __future__ import annotations

from typing import Any


class LeaseholdError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(LeaseholdError):
    """A setting is invalid; the message is one line naming it."""


class ApiError(LeaseholdError):
    """The API answered with an error status; ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or "error"
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.problem = problem


class CapacityExceeded(LeaseholdError):
    """A per-process bound (SSE followers, followed runs or queues) is reached: retry later."""

    def __init__(self, what: str, limit: int, setting: str) -> None:
        super().__init__(f"this API process already serves {limit} {what} ({setting})")
        self.what = what
        self.limit = limit
