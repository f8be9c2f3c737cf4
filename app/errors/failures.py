"""Why a run did not succeed (:class:`RunFailure`): each class a ``code`` and a
``retryable`` flag, carried in ``run.error``; the last four are written by Redis scripts,
never raised."""

from __future__ import annotations

from typing import Any

from app.errors.base import LeaseholdError


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


class InvalidRateLimitUse(RunFailure):
    """``ctx.rate_limit`` with a cost outside 1..burst, or a bad Retry-After: a handler bug."""

    code = "invalid_rate_limit_use"


class HandlerFailed(RunFailure):
    """The handler raised an exception that is not a :class:`RunFailure`."""

    code = "handler_error"
    retryable = True


class BudgetExceeded(RunFailure):
    """A time or step budget ran out. Non-retryable: a retry recreates the condition."""

    code = "budget_exceeded"
    retryable = False


class FirstProgressTimeout(BudgetExceeded):
    """The operation gave no first sign of progress within ``first_progress_s``."""

    code = "first_progress_timeout"


class IdleTimeout(BudgetExceeded):
    """The operation went silent for ``idle_s`` after having made progress."""

    code = "idle_timeout"


class DurationExceeded(BudgetExceeded):
    """The operation (or the run) ran longer than ``max_duration_s``, progress or not."""

    code = "duration_exceeded"


class BudgetExhausted(BudgetExceeded):
    """The run took ``max_steps`` steps and the watchdog granted no further extension."""

    code = "budget_exhausted"


class OperationIntervened(RunFailure):
    """The watchdog decided to stop an operation (INTERVENE)."""

    code = "operation_intervened"
    retryable = False


class InvalidCheckpoint(RunFailure):
    """The state given to ``ctx.checkpoint`` cannot be stored (it is not JSON).

    Non-retryable: the same code would produce the same state again.
    """

    code = "invalid_checkpoint"
    retryable = False


class CheckpointTooLarge(InvalidCheckpoint):
    """The checkpoint state is larger than LEASEHOLD_MAX_CHECKPOINT_BYTES."""

    code = "checkpoint_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"checkpoint state is {size} bytes; the limit is {limit} "
            "(LEASEHOLD_MAX_CHECKPOINT_BYTES): keep large data elsewhere and checkpoint a "
            "reference to it",
            details={"size_bytes": size, "limit_bytes": limit},
        )
        self.size = size
        self.limit = limit


class InvalidEffect(RunFailure):
    """``ctx.effect`` was called with a name that cannot key a record."""

    code = "invalid_effect"
    retryable = False


class InvalidEffectResult(InvalidEffect):
    """An effect's function returned a value that is not JSON or is too large to record.

    The side effect has happened but its result is not recorded: its record stays
    ``started``, so a later attempt treats its outcome as unknown.
    """

    code = "invalid_effect_result"


class EffectNotApplied(RunFailure):
    """Raised by an effect's function when the side effect certainly did not happen.

    The started record is dropped, so a later attempt calls the function again
    (e.g. a payment API answered "declined" before charging anything). Any other
    exception leaves the outcome unknown. Retryable unless told otherwise.
    """

    code = "effect_not_applied"
    retryable = True


class InvalidWait(RunFailure):
    """A durable wait was asked for with what cannot be recorded or kept.

    A name that is not ``[A-Za-z0-9_.-]{1,128}``, a negative, non-finite or
    longer-than-LEASEHOLD_MAX_WAIT_S duration, a time that is not a number or an
    aware datetime, a question that is not JSON or is larger than an event may be.
    Non-retryable: the same code asks for the same wait again.
    """

    code = "invalid_wait"
    retryable = False


class SignalTimeout(RunFailure):
    """``ctx.wait_for_signal(name, timeout_s=...)``: the time passed and no signal came.

    Raised in the handler when it resumes at the deadline (and again on every
    replay of that wait: the timeout is recorded). Non-retryable by default: a
    retry would wait for a signal whose time is over (DESIGN §1 rule 6); catch it
    to carry on without the signal.
    """

    code = "signal_timeout"
    retryable = False


class SpawnRefused(RunFailure):
    """``ctx.spawn`` was refused before anything was created.

    Past LEASEHOLD_MAX_CHILDREN_PER_RUN or LEASEHOLD_MAX_RUN_DEPTH (a handler that
    spawns itself stops there instead of filling Redis), a handler the worker does
    not know or an input it refuses, an undeclared queue, an input over
    LEASEHOLD_MAX_INPUT_BYTES. ``details`` say which bound and its value.
    Non-retryable: the same code asks for the same child again.
    """

    code = "spawn_refused"
    retryable = False


class ChildFailed(RunFailure):
    """``ctx.join(mode="all")``: a child ended without succeeding (or ``any``: every one did).

    ``child_id``, ``status`` (failed, cancelled, orphaned, expired) and the child's
    own ``error`` (its ``run.error``: code, message, details) are attached, and in
    ``details`` too, so the parent's ``run.error`` names the child that broke it.
    Not retryable by default: a retry of the parent joins the same child again.
    """

    code = "child_failed"
    retryable = False

    def __init__(self, child_id: str, status: str, error: dict[str, Any] | None) -> None:
        reason = (error or {}).get("message") or status
        super().__init__(
            f"child run {child_id} ended {status}: {reason}",
            details={"child_id": child_id, "status": status, "error": error},
        )
        self.child_id = child_id
        self.status = status
        self.error = error


class JoinTimeout(RunFailure):
    """``ctx.join(..., timeout_s=...)``: the time passed before the join's condition held.

    Raised when the parent resumes at the deadline (and on every replay of that
    join: the timeout is recorded). The children are not touched: they go on, and
    the parent's end applies their ``on_parent_end``. Catch it to carry on.
    """

    code = "join_timeout"
    retryable = False


class LeaseExpired(RunFailure):
    """The run's executor stopped renewing its lease and its policy did not retry it.

    Written on the ``orphaned`` run by the reconciler's script (``reconcile_expired``)
    as ``executor lease expired``, the evidence (owner, fence, last renewal, lease
    expiry, detection time) in ``details``; never raised.
    """

    code = "lease_expired"
    retryable = False


class QueuedTtlExpired(RunFailure):
    """Nobody claimed the run within its queued time-to-live: it ended ``expired``.

    Written by ``expire_queued`` (``details``: ``queued_for_ms``); never raised.
    """

    code = "queued_ttl_expired"
    retryable = False


class Superseded(RunFailure):
    """A newer run of its singleton key replaced the run before it started (``cancelled``).

    Written by the create of the newer run (``on_conflict="replace_queued"``;
    ``details``: ``superseded_by``); never raised.
    """

    code = "superseded"
    retryable = False


class ResolvedAsFailed(RunFailure):
    """A person resolved a parked run as failed (``POST /runs/{id}/resolve``).

    Written by ``resolve_run`` (``details``: the decision and the error it replaced);
    never raised.
    """

    code = "resolved_as_failed"
    retryable = False
