"""Run leases and the reconciler: the lease TTL, the renewals, the scans for expired ones.

The TTL is detection, not a budget: how long a silent executor is presumed alive.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from app.settings.group import ENV_PREFIX, HOUR_S, SettingsGroup


class LeaseSettings(SettingsGroup):
    """Lease timing and the reconciler."""

    lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Run lease TTL: how long a silent executor is presumed alive (detection only)",
    )
    reconcile_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=HOUR_S,
        allow_inf_nan=False,
        description="How often reconcilers scan for expired leases; unset means TTL/3",
    )
    lease_safety_margin_s: float | None = Field(
        default=None,
        ge=0,
        description="A worker that cannot renew stops its runs this long before the TTL ends; "
        "unset means TTL/6",
    )
    reconciler_enabled: bool = Field(
        default=True, description="Run a reconciler inside every worker"
    )

    @model_validator(mode="after")
    def _check_lease_timing(self) -> Self:
        if (
            self.lease_safety_margin_s is not None
            and self.lease_safety_margin_s >= self.lease_ttl_s
        ):
            raise ValueError(
                f"{ENV_PREFIX}LEASE_SAFETY_MARGIN_S must be shorter than {ENV_PREFIX}LEASE_TTL_S"
            )
        return self

    @property
    def renew_interval_s(self) -> float:
        """Heartbeat period: a third of the TTL, so two renewals may fail before expiry."""
        return self.lease_ttl_s / 3

    @property
    def effective_reconcile_interval_s(self) -> float:
        """How often each reconciler scans; defaults to TTL/3 like the heartbeat."""
        return self.reconcile_interval_s or self.lease_ttl_s / 3

    @property
    def effective_safety_margin_s(self) -> float:
        """Slack subtracted from the jeopardy deadline to absorb clock-rate drift and latency."""
        if self.lease_safety_margin_s is not None:
            return self.lease_safety_margin_s
        return self.lease_ttl_s / 6

    @property
    def lease_ttl_ms(self) -> int:
        """The TTL in the unit the Lua scripts use."""
        return max(1, round(self.lease_ttl_s * 1000))
