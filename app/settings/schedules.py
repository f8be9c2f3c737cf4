"""Schedules: how many may exist, how often reconcilers fire them, how missed fires catch up."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import DAY_S, HOUR_S, MAX_KEEP_S, SettingsGroup


class ScheduleSettings(SettingsGroup):
    """Schedules and their fires."""

    schedule_max: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most schedules that may exist (POST /schedules past it: 409); each "
        "reconciler reads every queue's due ones each tick",
    )
    schedule_tick_s: float = Field(
        default=1.0,
        ge=0.05,
        le=HOUR_S,
        allow_inf_nan=False,
        description="How often every reconciler looks for due schedule fires (a fire starts "
        "within about this of its time)",
    )
    schedule_interval_min_s: float = Field(
        default=1.0,
        ge=0.05,
        le=DAY_S,
        allow_inf_nan=False,
        description="Shortest interval_s a schedule may have (else 422)",
    )
    schedule_grace_s: float = Field(
        default=2.0,
        gt=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="A fire found up to this late is on time; older ones are missed fires, "
        "which the schedule's missed policy (skip, latest, all) decides",
    )
    schedule_catchup_window_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Default catch-up window: how old a missed fire may be and still run "
        "(missed=latest or all)",
    )
    schedule_catchup_window_max_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Longest catchup_window_s a schedule may ask for (else 422)",
    )
    schedule_fires_per_tick_max: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Most fires of one schedule one reconciler tick materializes (missed=all "
        "catches up over several ticks)",
    )
    schedule_backfill_max_fires: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most fire times one POST /schedules/{id}/backfill may cover (else 422)",
    )
