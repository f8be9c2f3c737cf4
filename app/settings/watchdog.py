"""Inside a run: operation leases, their budgets per kind, and the watchdog.

The watchdog judges a silent operation: renew it, or intervene.
"""

from __future__ import annotations

from pydantic import Field

from app.settings.group import DAY_S, HOUR_S, SettingsGroup


class WatchdogSettings(SettingsGroup):
    """Operation leases, budgets and the watchdog."""

    op_default_lease_s: float = Field(
        default=30.0,
        gt=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="Operation lease when neither the call nor OP_LEASE_S names one for its kind",
    )
    op_lease_s: dict[str, float] = Field(
        default_factory=dict,
        description="Operation lease per kind: LEASEHOLD_OP_LEASE_S__MODEL_CALL=30",
    )
    op_first_progress_s: dict[str, float] = Field(
        default_factory=dict,
        description="Time-to-first-progress budget per kind: ..._FIRST_PROGRESS_S__MODEL_CALL=600",
    )
    op_idle_s: dict[str, float] = Field(
        default_factory=dict,
        description="Idle budget (longest silence) per kind: ..._IDLE_S__MODEL_CALL=60",
    )
    op_max_duration_s: dict[str, float] = Field(
        default_factory=dict,
        description="Absolute duration budget per kind: LEASEHOLD_OP_MAX_DURATION_S__TOOL_CALL=300",
    )
    watchdog_free_renewals: int = Field(
        default=2, ge=0, description="Lease renewals the watchdog grants without looking"
    )
    watchdog_max_renewals: int = Field(
        default=10, ge=1, description="Renewals after which the watchdog intervenes, whatever else"
    )
    watchdog_suspicion_threshold: float = Field(
        default=3.0,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description="Suspicion (phi) of a silent operation at which the watchdog intervenes",
    )
    watchdog_evaluator: str | None = Field(
        default=None,
        description="Python callable 'module:function' the watchdog asks about silent operations",
    )
    watchdog_judge_url: str | None = Field(
        default=None,
        description="HTTP judge the watchdog POSTs evidence to (when no callable is set)",
    )
    watchdog_evaluator_timeout_s: float = Field(
        default=15.0,
        gt=0,
        le=HOUR_S,
        allow_inf_nan=False,
        description="Hard timeout of one evaluator call; a timeout means RENEW",
    )
    watchdog_max_step_extensions: int = Field(
        default=3, ge=0, description="Times a run's max_steps may be extended, at most"
    )
    step_extension_ratio: float = Field(
        default=0.5,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description="Each step extension adds this fraction of max_steps",
    )
