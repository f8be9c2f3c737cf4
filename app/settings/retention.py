"""Retention: how long a finished run (record, events, effects, idempotency key) is kept."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import MAX_KEEP_S, SettingsGroup


class RetentionSettings(SettingsGroup):
    """How long finished runs are kept."""

    retention_succeeded_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a succeeded run (record, events, effects, idempotency key) is kept",
    )
    retention_failed_s: float = Field(
        default=30 * 24 * 3600.0, gt=0, le=MAX_KEEP_S, description="How long a failed run is kept"
    )
    retention_cancelled_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, le=MAX_KEEP_S, description="How long a cancelled run is kept"
    )
    retention_orphaned_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long an orphaned run is kept",
    )
    retention_expired_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a run that expired unclaimed (queued_ttl_s) is kept",
    )
    retention_max_s: float = Field(
        default=365 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="Longest retention_s a create request may ask for (else 422)",
    )

    @property
    def retention_ms(self) -> dict[str, int]:
        """How long a finished run is kept, per terminal status, in the unit Lua uses."""
        seconds = {
            "succeeded": self.retention_succeeded_s,
            "failed": self.retention_failed_s,
            "cancelled": self.retention_cancelled_s,
            "orphaned": self.retention_orphaned_s,
            "expired": self.retention_expired_s,
        }
        return {status: max(1, round(value * 1000)) for status, value in seconds.items()}
