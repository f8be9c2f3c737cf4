"""The run-level step budget (``max_steps``), counted by ``ctx.step()``.

When the budget is used up, the watchdog is asked for a *proportional*
extension (``step_extension_ratio`` of ``max_steps`` each time, at most
``max_step_extensions`` times) before the run fails with
:class:`BudgetExhausted`. A run without ``max_steps`` is never capped.
The count is per attempt: a handler that needs it across attempts keeps it in
its checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import BudgetExhausted, EscalationRequested
from app.supervision.verdicts import Evidence, Verdict
from app.supervision.watchdog import Watchdog
from app.telemetry.metrics import VERDICTS

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


class StepBudget:
    """Counts steps against ``max_steps`` and negotiates extensions with the watchdog."""

    def __init__(
        self, max_steps: int | None, *, watchdog: Watchdog, ratio: float, emit: Emit
    ) -> None:
        self.max_steps = max_steps
        self.limit = max_steps
        self.steps = 0
        self.extensions = 0
        self._watchdog = watchdog
        self._ratio = ratio
        self._emit = emit

    async def advance(self) -> int:
        """Count one step; raises BudgetExhausted when no extension is granted."""
        self.steps += 1
        if self.max_steps is None or self.limit is None or self.steps <= self.limit:
            return self.steps
        evidence = Evidence(
            kind="run",
            subject="steps",
            lease_s=0.0,
            elapsed_s=0.0,
            renewals=self.extensions,
            progress_count=self.steps,
            since_progress_s=None,
            progressed_last_period=True,
            suspicion=0.0,
            extra={"max_steps": self.max_steps, "limit": self.limit},
        )
        decision = await self._watchdog.decide_extension(evidence, extensions=self.extensions)
        VERDICTS.labels(decision.verdict.value, "run").inc()
        granted = decision.verdict in (Verdict.RENEW, Verdict.NUDGE)
        added = max(1, math.ceil(self.max_steps * self._ratio)) if granted else 0
        await self._emit(
            "verdict",
            {
                "verdict": decision.verdict.value,
                "reason": decision.reason,
                "evaluator": decision.evaluator,
                "renewals": self.extensions,
                "kind": "run",
                "subject": "steps",
                "note": decision.note,
                "evidence": {**evidence.as_dict(), "extension_steps": added},
            },
        )
        if decision.verdict == Verdict.ESCALATE:
            raise EscalationRequested(decision.reason, evidence=evidence.as_dict())
        if not granted:
            raise BudgetExhausted(
                f"step budget used: {self.steps - 1} steps of max_steps={self.max_steps} "
                f"after {self.extensions} extensions ({decision.reason})",
                details={"max_steps": self.max_steps, "extensions": self.extensions},
            )
        self.extensions += 1
        self.limit += added
        return self.steps
