"""Queues: which a process declares and serves, how many may be declared, how long a run waits."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from app.models import QUEUE_NAME_PATTERN
from app.settings.group import MAX_KEEP_S, CommaList, SettingsGroup

_QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)


class QueueSettings(SettingsGroup):
    """Queues declared and served, and how long a run may wait on one."""

    queues: CommaList = Field(
        default_factory=lambda: ["default"],
        min_length=1,
        description="Queues a worker claims from, and queues this process declares: runs "
        "may be created only on declared queues (comma-separated)",
    )
    max_queues: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Most queues PUT /queues/{name} may declare (else 409); listing and "
        "/metrics cost one read per declared queue",
    )
    queued_ttl_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a run may wait unclaimed before it ends `expired`",
    )
    queued_ttl_max_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="Longest queued_ttl_s a create request may ask for (else 422)",
    )
    start_max_ahead_s: float = Field(
        default=365 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Furthest ahead a create's run_at / delay_s may put a run's start "
        "(else 422): a delayed run is held in Redis until then",
    )

    @field_validator("queues")
    @classmethod
    def _check_queue_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _QUEUE_NAME.fullmatch(name):
                raise ValueError(f"queue name {name!r} must match {QUEUE_NAME_PATTERN}")
        return value

    @property
    def queued_ttl_ms(self) -> int:
        """The queued time-to-live in the unit Lua uses."""
        return max(1, round(self.queued_ttl_s * 1000))
