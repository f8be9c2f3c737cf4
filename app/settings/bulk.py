"""Bulk operations: ``POST /runs/purge`` and the bulk retries of ``POST /runs/retry``."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import DAY_S, SettingsGroup


class BulkSettings(SettingsGroup):
    """Bulk purges and retries."""

    purge_batch_max: int = Field(
        default=1000,
        ge=1,
        le=10_000,
        description="Most runs one POST /runs/purge deletes (its `limit` may not exceed it)",
    )
    retry_batch_size: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Runs a bulk retry (POST /runs/retry) re-runs per step; its progress is "
        "saved after each step",
    )
    retry_operation_max_runs: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most runs one bulk retry may re-run (its `limit`; more: 422)",
    )
    retry_operations_max: int = Field(
        default=4,
        ge=1,
        le=100,
        description="Bulk retries one API process drives at once (more: 503 with Retry-After)",
    )
    operation_retention_s: float = Field(
        default=604_800.0,
        gt=0,
        le=30 * DAY_S,
        allow_inf_nan=False,
        description="How long a bulk retry's record (filter, progress) is kept after its last step",
    )
    operation_empty_retention_s: float = Field(
        default=3_600.0,
        gt=0,
        le=30 * DAY_S,
        allow_inf_nan=False,
        description="How long the record of a bulk retry that re-ran nothing is kept (at most "
        "LEASEHOLD_OPERATION_RETENTION_S): requests that match nothing cannot pile up for a week",
    )
