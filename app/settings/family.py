"""Run families: how many children a run may spawn, how deep, and how their ends travel.

The outboxes deliver a child's end to its parent and a parent's to its children.
"""

from __future__ import annotations

from pydantic import Field

from app.settings.group import SettingsGroup


class FamilySettings(SettingsGroup):
    """Spawned children and their delivery."""

    max_children_per_run: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most children one run may spawn (ctx.spawn); one more raises SpawnRefused "
        "in the handler and creates nothing: the parent's index and outcomes live in one slot",
    )
    outbox_sweep_s: float = Field(
        default=0.25,
        gt=0,
        le=60,
        allow_inf_nan=False,
        description="How often every reconciler delivers what the queues' outboxes hold: a "
        "child's end to its parent (wakes its join), a parent's end to its children",
    )
    max_run_depth: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="Deepest a spawned run may sit below its root (a top-level run is 0); a "
        "deeper spawn raises SpawnRefused, so a run that spawns itself cannot fork-bomb",
    )
