"""Durable waits and signals: how long a parked run may wait, and what it may hold."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import MAX_KEEP_S, SettingsGroup


class WaitSettings(SettingsGroup):
    """Durable waits and signals."""

    max_wait_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Longest durable wait a handler may ask for (ctx.sleep, sleep_until, "
        "wait_for_signal's timeout; else InvalidWait): a parked run is kept in Redis till then",
    )
    max_waits_per_run: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most durable waits (and pending signal names) one run records; one more "
        "raises InvalidWait: a handler replays its waits from the top on every wake",
    )
    max_signal_bytes: int = Field(
        default=65_536,
        ge=64,
        le=16 * 1_048_576,
        description="Largest payload POST /runs/{id}/signals/{name} accepts (JSON bytes; else 413)",
    )
    max_pending_signals: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="Most signals a run holds that no wait has taken yet (its inbox); one more "
        "is refused with 429 and nothing written",
    )
