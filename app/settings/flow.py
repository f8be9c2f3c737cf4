"""Flow control: a queue's concurrency limits, priority aging, and rate limits."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import HOUR_S, SettingsGroup


class FlowSettings(SettingsGroup):
    """Concurrency limits, priorities and rate limits."""

    max_limits: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most entries (handlers + keys) PUT /queues/{name}/limits may declare",
    )
    queue_top_keys: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="How many concurrency keys GET /queues/{name} shows (the busiest)",
    )
    priority_aging_step_s: float = Field(
        default=1.0,
        ge=0,
        le=HOUR_S,
        description="Aging of priorities: a run is passed only by runs of priority p "
        "higher enqueued less than p x this after it (0: strict priority, no aging)",
    )
    max_rate_limits: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most rate-limit keys and templates PUT /rate-limits/{key} may declare "
        "(else 409); GET /rate-limits reads one bucket per declared key",
    )
    rate_limit_max_wait_s: float = Field(
        default=60.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="Longest ctx.rate_limit waits for a token holding its lease; a later "
        "token releases the run until then instead, without spending an attempt",
    )
