"""Every exception Leasehold raises, in one tree.

::

    LeaseholdError
    ├── ConfigurationError            a setting is invalid (the CLI exits 2)
    ├── StoreError                    Redis said no, or could not be reached
    │   ├── RunNotFound
    │   ├── InvalidTransition         e.g. cancel of a succeeded run
    │   ├── IdempotencyConflict       same key, different body
    │   └── LeaseLost                 fenced out: another owner holds the run now
    ├── HandlerError                  registry problems
    │   ├── UnknownHandler
    │   └── InvalidInput              input fails the handler's model
    ├── InvalidEvent                  a handler emitted a reserved or malformed event
    │   └── EventTooLarge             ... or one over the configured size bound
    └── RunFailure                    why a run ended ``failed``; carried in ``run.error``
        ├── HandlerFailed             the handler raised something untyped
        ├── BudgetExceeded            a budget ran out (non-retryable by default)
        └── OperationIntervened       the watchdog stopped an operation

Each :class:`RunFailure` has a stable ``code`` and a ``retryable`` flag; the worker
records both on the run, and the retry policy reads ``retryable``.
"""

from __future__ import annotations

from typing import Any


class LeaseholdError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(LeaseholdError):
    """A setting is invalid; the message is one line naming it."""


class StoreError(LeaseholdError):
    """A store operation failed for a reason the caller can act on."""


class RunNotFound(StoreError):
    """No run with this id (never created, or expired after retention)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class InvalidTransition(StoreError):
    """The run's current status does not allow the requested transition."""

    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}")
        self.run_id = run_id
        self.status = status
        self.action = action


class IdempotencyConflict(StoreError):
    """The idempotency key was used before with a different request body."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for run {run_id!r} with a different body"
        )
        self.key = key
        self.run_id = run_id


class LeaseLost(StoreError):
    """A fenced write was rejected: this owner no longer holds the run."""

    def __init__(self, run_id: str, fence: int) -> None:
        super().__init__(f"lease on run {run_id!r} at fence {fence} is lost")
        self.run_id = run_id
        self.fence = fence


class HandlerError(LeaseholdError):
    """A handler cannot be found or its input is not acceptable."""


class UnknownHandler(HandlerError):
    """No handler is registered under this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown handler {name!r}")
        self.name = name


class InvalidInput(HandlerError):
    """The run input does not validate against the handler's input model."""

    def __init__(self, handler: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"input for handler {handler!r} is invalid")
        self.handler = handler
        self.problems = problems


class InvalidEvent(LeaseholdError):
    """A handler tried to emit an event that would corrupt its run's stream."""


class EventTooLarge(InvalidEvent):
    """A handler tried to emit an event whose payload exceeds the configured bound."""

    def __init__(self, event_type: str, size: int, limit: int) -> None:
        super().__init__(f"event {event_type!r} is {size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


class RunFailure(LeaseholdError):
    """A reason for a run to end ``failed``; its fields become ``run.error``."""

    code = "run_failed"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.details = details or {}


class HandlerFailed(RunFailure):
    """The handler raised an exception that is not a :class:`RunFailure`."""

    code = "handler_error"
    retryable = True


class BudgetExceeded(RunFailure):
    """A time or step budget ran out. Non-retryable: a retry recreates the condition."""

    code = "budget_exceeded"
    retryable = False


class OperationIntervened(RunFailure):
    """The watchdog decided to stop an operation (INTERVENE)."""

    code = "operation_intervened"
    retryable = False
