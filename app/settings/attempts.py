"""A run's defaults when its request names none: attempts, lease expiry, retry backoff."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.models import Versioning
from app.settings.group import DAY_S, SettingsGroup


class AttemptSettings(SettingsGroup):
    """A run's attempts and retry backoff by default."""

    default_max_attempts: int = Field(
        default=1, ge=1, le=1000, description="Attempts a run gets when its request names none"
    )
    default_on_lease_expired: Literal["orphan", "retry"] = Field(
        default="orphan",
        description="What the reconciler does with an expired run when its request names "
        "nothing: orphan (terminal) or retry (requeue while attempts remain)",
    )
    default_versioning: Versioning = Field(
        default="auto_upgrade",
        description="Which builds may run a run when neither its request nor its handler "
        "says: auto_upgrade (any build, at each claim; the drift check parks a run whose "
        "recorded steps the new code does not take) or pinned (the build that first "
        "claimed it, until POST /runs/{id}/upgrade)",
    )
    retry_backoff_s: float = Field(
        default=1.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="First delay before a retryable failure runs again",
    )
    retry_backoff_max_s: float = Field(
        default=60.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="Cap of the exponential retry delay",
    )
