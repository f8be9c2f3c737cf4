"""Memory and admission: how full Redis may get, and how big what is written to it may be.

The high-water mark past which creates are refused, and the size bounds of what a
client sends (inputs, metadata, batches) or a handler writes (events, checkpoints).
"""

from __future__ import annotations

from pydantic import Field

from app.settings.group import SettingsGroup


class MemorySettings(SettingsGroup):
    """Redis memory admission and the size bounds of what is written to it."""

    memory_high_water: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description="Fraction of Redis maxmemory past which the API refuses creates (503 + "
        "Retry-After); the rest is headroom for running work to write its outcome",
    )
    memory_check_interval_s: float = Field(
        default=1.0,
        ge=0.05,
        le=60,
        description="How long an API process trusts its last reading of Redis memory (INFO "
        "memory) before a create reads it again",
    )
    batch_max_items: int = Field(
        default=1000,
        ge=1,
        le=10_000,
        description="Most runs one POST /runs/batch creates (more: 413, nothing written)",
    )
    max_input_bytes: int = Field(
        default=1_048_576, ge=64, description="Largest run input POST /runs accepts (else 413)"
    )
    max_metadata_bytes: int = Field(
        default=16_384,
        ge=64,
        le=1_048_576,
        description="Largest metadata a run may carry (its compact JSON, UTF-8 bytes) on every "
        "path that writes it: a create, a batch item, a schedule's run, a spawned child (else "
        "422, or SpawnRefused); every listing that filters by metadata reads it",
    )
    max_input_depth: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="Deepest nesting of arrays/objects a run's input or metadata may have "
        "(else 422)",
    )
    max_event_bytes: int = Field(
        default=65_536, ge=64, description="Largest event payload a handler may emit"
    )
    max_checkpoint_bytes: int = Field(
        default=1_048_576,
        ge=64,
        description="Largest state a handler may checkpoint, and largest effect result it "
        "may record (JSON bytes); larger raises CheckpointTooLarge / InvalidEffectResult",
    )
    events_maxlen: int = Field(
        default=10_000, ge=10, description="Events kept per run stream (approximate trim)"
    )
