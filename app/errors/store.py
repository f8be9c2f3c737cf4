"""The store's refusals (:class:`StoreError`): Redis said no, or could not be reached."""

from __future__ import annotations

from typing import Any

from app.errors.base import LeaseholdError


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


class AlreadyRetried(StoreError):
    """``POST /runs/{id}/retry`` of a run whose re-run still exists: retry that one instead.

    A run is re-run at most once at a time, so the links stay a chain
    (``retry_of`` / ``retried_by``) and two clicks make one new run, not two.
    """

    def __init__(self, run_id: str, retried_by: str) -> None:
        super().__init__(
            f"run {run_id!r} was already re-run as {retried_by!r}; retry that run instead"
        )
        self.run_id = run_id
        self.retried_by = retried_by


class OperationNotFound(StoreError):
    """No bulk operation with this id (never made, or its record's retention ended)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"operation {operation_id!r} not found")
        self.operation_id = operation_id


class OperationConflict(StoreError):
    """The operation cannot do that now: it is finished, or another process drives it."""

    def __init__(self, operation_id: str, reason: str) -> None:
        super().__init__(f"operation {operation_id!r}: {reason}")
        self.operation_id = operation_id
        self.reason = reason


class SingletonConflict(StoreError):
    """``on_conflict="reject"``: a run of this singleton key is active or queued (409)."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(f"singleton key {key!r} is held by run {run_id!r}")
        self.key = key
        self.run_id = run_id


class QueueNotDeclared(StoreError):
    """No configuration and no ``PUT /queues/{name}`` declared this queue."""

    # a 422 names the declared queues, but never more than this many of them
    NAMED_AT_MOST = 20

    def __init__(self, queue: str, declared: list[str]) -> None:
        shown = ", ".join(declared[: self.NAMED_AT_MOST])
        if len(declared) > self.NAMED_AT_MOST:
            shown += f" and {len(declared) - self.NAMED_AT_MOST} more"
        super().__init__(
            f"queue {queue!r} is not declared; declared: {shown or 'none'} "
            "(declare it in LEASEHOLD_QUEUES or with PUT /queues/{name})"
        )
        self.queue = queue
        self.declared = declared


class QueueLimitReached(StoreError):
    """Declaring one more queue would pass ``LEASEHOLD_MAX_QUEUES``."""

    def __init__(self, queue: str, max_queues: int) -> None:
        super().__init__(
            f"cannot declare queue {queue!r}: {max_queues} queues are declared, "
            "the most LEASEHOLD_MAX_QUEUES allows"
        )
        self.queue = queue
        self.max_queues = max_queues


class RateLimitsFull(StoreError):
    """Declaring one more rate-limit key would pass ``LEASEHOLD_MAX_RATE_LIMITS``."""

    def __init__(self, key: str, max_keys: int) -> None:
        super().__init__(
            f"cannot declare rate-limit key {key!r}: {max_keys} are declared, "
            "the most LEASEHOLD_MAX_RATE_LIMITS allows"
        )
        self.key = key
        self.max_keys = max_keys


class RateLimitNotDeclared(StoreError):
    """No declared rate-limit key or template covers this key."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"rate-limit key {key!r} is not declared (PUT /rate-limits/{{key}} declares it)"
        )
        self.key = key


class ScheduleNotFound(StoreError):
    """No schedule has this id."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id!r}")
        self.schedule_id = schedule_id


class ScheduleConflict(StoreError):
    """The id exists already, or the schedule changed since the caller read it (409)."""


class ScheduleLimitReached(StoreError):
    """Creating one more schedule would pass ``LEASEHOLD_SCHEDULE_MAX`` (409)."""


class QueueNotEmpty(StoreError):
    """Undeclaring a queue that still holds runs, or one this API's configuration names."""

    def __init__(self, queue: str, reason: str, holds: dict[str, int] | None = None) -> None:
        super().__init__(f"cannot undeclare queue {queue!r}: {reason}")
        self.queue = queue
        self.holds = holds or {}


class LeaseLost(StoreError):
    """A fenced write was rejected: this owner no longer holds the run."""

    def __init__(self, run_id: str, fence: int) -> None:
        super().__init__(f"lease on run {run_id!r} at fence {fence} is lost")
        self.run_id = run_id
        self.fence = fence


class MemoryPressure(StoreError):
    """Redis memory is (or a write would take it) past ``LEASEHOLD_MEMORY_HIGH_WATER``.

    Refused early on purpose, so the headroom above the mark stays for the runs
    already running to write their outcomes. Nothing was written.
    """

    def __init__(
        self, *, used_bytes: int, max_bytes: int, high_water: float, cost_bytes: int = 0
    ) -> None:
        adding = f", and this write would add about {cost_bytes} bytes" if cost_bytes else ""
        super().__init__(
            f"Redis uses {used_bytes} of {max_bytes} bytes of maxmemory{adding}, past the "
            f"high-water mark of {high_water:.0%}: new runs are refused until memory frees "
            "(finished runs expire after their retention)"
        )
        self.used_bytes = used_bytes
        self.max_bytes = max_bytes
        self.high_water = high_water
        self.cost_bytes = cost_bytes


class EffectOutcomeUnknown(StoreError):
    """An effect started on an earlier attempt and its outcome was never recorded.

    Calling it again could apply it twice (it is not idempotent), so the run was
    parked in ``reconciliation_required`` by the same script that found the record;
    a person resolves it (POST /runs/{id}/resolve). Raised into the handler so it
    stops at once; handlers should let it propagate. The parked run's ``error``
    carries its code (written by the script, with the records in ``details``).
    """

    code = "effect_outcome_unknown"
    retryable = False

    def __init__(self, run_id: str, record: dict[str, Any]) -> None:
        super().__init__(
            f"effect {record.get('name')!r} (key {record.get('key')!r}) of run {run_id!r} "
            "started before and its outcome is unknown: the run needs a person to resolve it"
        )
        self.run_id = run_id
        self.record = record


class VersionDrift(StoreError):
    """A replay asked for another step than the run recorded at that position.

    The handler's code changed between the attempt that recorded the run's steps and
    this one (a deploy between a park and its wake, or a takeover by another build):
    replaying by name and count would hand a recorded result to the wrong step, or run
    a side effect in the wrong order. Found before anything was replayed or run; the run
    was parked in ``reconciliation_required`` (code ``version_drift``, both sequences in
    the error's ``details``) by the same call. Raised into the handler so it stops at
    once; handlers should let it propagate. Guard such changes with ``ctx.patched``.
    """

    code = "version_drift"
    retryable = False

    def __init__(self, run_id: str, details: dict[str, Any]) -> None:
        super().__init__(
            f"run {run_id!r} asked for step {details.get('taken')!r} at position "
            f"{details.get('position')}, where it recorded {details.get('recorded')!r}: "
            "its code changed under it; the run needs a person to resolve it"
        )
        self.run_id = run_id
        self.details = details


class HistoryTooLarge(StoreError):
    """A run's step records are too many for one history document (``GET /runs/{id}/history``).

    The events are cut to fit (``events_truncated``); the records a replay needs are
    not, since a replay of part of them would report drift where there is none.
    """

    def __init__(self, run_id: str, records: int, limit: int) -> None:
        super().__init__(
            f"run {run_id!r} holds {records} step records; a history holds at most {limit}"
        )
        self.run_id = run_id
        self.records = records
        self.limit = limit


class SignalInboxFull(StoreError):
    """A run holds as many unread signals as LEASEHOLD_MAX_PENDING_SIGNALS allows.

    (``pending`` None: as many waits and signal keys as LEASEHOLD_MAX_WAITS_PER_RUN.)
    """

    def __init__(self, run_id: str, pending: int | None) -> None:
        super().__init__(
            f"run {run_id!r} holds {pending} signals no wait has taken yet "
            "(LEASEHOLD_MAX_PENDING_SIGNALS): nothing was written"
            if pending is not None
            else f"run {run_id!r} holds as many waits and signal keys as it may "
            "(LEASEHOLD_MAX_WAITS_PER_RUN): nothing was written"
        )
        self.run_id = run_id
        self.pending = pending


class QuotaExceeded(StoreError):
    """A namespace's quota refuses this write (429): nothing was written.

    ``quota`` names it as ``PUT /namespaces/{name}`` does (``live_runs``,
    ``creates_per_s``...); ``retry_after_s`` is when asking again may pass.
    """

    def __init__(
        self, *, namespace: str, quota: str, limit: int, detail: str, retry_after_s: int
    ) -> None:
        super().__init__(f"namespace {namespace!r}: quota {quota} ({limit}) {detail}")
        self.namespace = namespace
        self.quota = quota
        self.limit = limit
        self.retry_after_s = max(1, retry_after_s)
