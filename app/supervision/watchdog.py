"""The watchdog: decides what to do when an operation outlives its lease.

A ladder, cheapest rung first:

1. ``max_renewals`` bounds everything: past it, INTERVENE.
2. The first ``free_renewals`` cost nothing: RENEW without looking.
3. Evidence: progress within the last lease period → RENEW.
4. A silent period. With an evaluator configured, it decides (under its own
   timeout; any failure → RENEW). Without one, suspicion decides: below
   ``suspicion_threshold`` → RENEW, at or above → INTERVENE.

Slow-but-alive work (progress keeps coming) is therefore never stopped by the
watchdog; only ``max_renewals``, a budget, an evaluator's verdict or a person
ends it — and the error says which.

Step extensions (``max_steps``) go through the same watchdog: the ladder grants
a proportional extension up to ``max_step_extensions`` times, unless an
evaluator says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.supervision.evaluators import Evaluator, consult
from app.supervision.verdicts import Decision, Evidence, Verdict


@dataclass(frozen=True)
class WatchdogPolicy:
    """The ladder's knobs (settings LEASEHOLD_WATCHDOG_*)."""

    free_renewals: int = 2
    max_renewals: int = 10
    suspicion_threshold: float = 3.0
    evaluator_timeout_s: float = 15.0
    max_step_extensions: int = 3


class Watchdog:
    """Turns evidence into a :class:`Decision`; stateless between calls."""

    def __init__(self, policy: WatchdogPolicy, evaluator: Evaluator | None = None) -> None:
        self.policy = policy
        self.evaluator = evaluator

    async def decide(self, evidence: Evidence) -> Decision:
        """Walk the ladder for an operation whose lease timer fired."""
        policy = self.policy
        if evidence.renewals >= policy.max_renewals:
            return Decision(
                Verdict.INTERVENE,
                f"renewal budget used: {evidence.renewals} of {policy.max_renewals}",
            )
        if evidence.renewals < policy.free_renewals:
            return Decision(
                Verdict.RENEW, f"free renewal {evidence.renewals + 1} of {policy.free_renewals}"
            )
        if evidence.progressed_last_period:
            return Decision(Verdict.RENEW, "progress during the last lease period")
        if self.evaluator is not None:
            return await consult(self.evaluator, evidence, timeout_s=policy.evaluator_timeout_s)
        if evidence.suspicion >= policy.suspicion_threshold:
            return Decision(
                Verdict.INTERVENE,
                f"silent: suspicion {evidence.suspicion:.2f} reached {policy.suspicion_threshold}",
            )
        return Decision(
            Verdict.RENEW,
            f"silent, suspicion {evidence.suspicion:.2f} below {policy.suspicion_threshold}",
        )

    async def decide_extension(self, evidence: Evidence, *, extensions: int) -> Decision:
        """Should a run that used its step budget get a proportional extension?"""
        if extensions >= self.policy.max_step_extensions:
            return Decision(Verdict.INTERVENE, f"step budget extended {extensions} times already")
        if self.evaluator is not None:
            return await consult(
                self.evaluator, evidence, timeout_s=self.policy.evaluator_timeout_s
            )
        return Decision(
            Verdict.RENEW, f"extension {extensions + 1} of {self.policy.max_step_extensions}"
        )
