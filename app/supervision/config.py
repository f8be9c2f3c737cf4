"""Supervision settings resolved for use: per-kind operation limits and the watchdog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.settings import Settings
from app.supervision.evaluators import load_evaluator
from app.supervision.operation import OperationLimits
from app.supervision.watchdog import Watchdog, WatchdogPolicy


@dataclass(frozen=True)
class Supervision:
    """What a run needs to supervise its operations and steps."""

    watchdog: Watchdog
    default_lease_s: float
    lease_s: Mapping[str, float]
    first_progress_s: Mapping[str, float]
    idle_s: Mapping[str, float]
    max_duration_s: Mapping[str, float]
    step_extension_ratio: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Supervision:
        """Build the watchdog (and its evaluator) and the per-kind defaults."""
        policy = WatchdogPolicy(
            free_renewals=settings.watchdog_free_renewals,
            max_renewals=settings.watchdog_max_renewals,
            suspicion_threshold=settings.watchdog_suspicion_threshold,
            evaluator_timeout_s=settings.watchdog_evaluator_timeout_s,
            max_step_extensions=settings.watchdog_max_step_extensions,
        )
        evaluator = load_evaluator(
            callable_path=settings.watchdog_evaluator, judge_url=settings.watchdog_judge_url
        )
        return cls(
            watchdog=Watchdog(policy, evaluator),
            default_lease_s=settings.op_default_lease_s,
            lease_s=settings.op_lease_s,
            first_progress_s=settings.op_first_progress_s,
            idle_s=settings.op_idle_s,
            max_duration_s=settings.op_max_duration_s,
            step_extension_ratio=settings.step_extension_ratio,
        )

    def limits(
        self,
        kind: str,
        *,
        lease_s: float | None = None,
        first_progress_s: float | None = None,
        idle_s: float | None = None,
        max_duration_s: float | None = None,
    ) -> OperationLimits:
        """The call's own values, else the kind's settings, else the defaults."""
        key = kind.lower()
        return OperationLimits(
            lease_s=lease_s if lease_s is not None else self.lease_s.get(key, self.default_lease_s),
            first_progress_s=(
                first_progress_s if first_progress_s is not None else self.first_progress_s.get(key)
            ),
            idle_s=idle_s if idle_s is not None else self.idle_s.get(key),
            max_duration_s=(
                max_duration_s if max_duration_s is not None else self.max_duration_s.get(key)
            ),
        )
