"""What the watchdog sees (evidence) and what it says (a decision with a verdict)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """The four answers to "this operation outlived its lease: now what?"."""

    RENEW = "RENEW"  # re-arm the timer on the same in-flight operation
    NUDGE = "NUDGE"  # leave a note for the handler's next step, then renew
    INTERVENE = "INTERVENE"  # cancel the operation; the handler gets OperationIntervened
    ESCALATE = "ESCALATE"  # cancel it and park the run for a person (waiting_human)


@dataclass(frozen=True)
class Evidence:
    """Facts about one operation at the moment its lease timer fired.

    ``suspicion`` is phi-accrual in spirit: -log10 of the probability of a silence
    this long given the gaps between progress signals seen so far (or the time to
    first progress the operation was granted, before any signal came).
    """

    kind: str
    subject: str
    lease_s: float
    elapsed_s: float
    renewals: int
    progress_count: int
    since_progress_s: float | None
    progressed_last_period: bool
    suspicion: float
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, for events and for HTTP judges."""
        data = asdict(self)
        data["elapsed_s"] = round(self.elapsed_s, 3)
        data["suspicion"] = round(self.suspicion, 3)
        if self.since_progress_s is not None:
            data["since_progress_s"] = round(self.since_progress_s, 3)
        return data


@dataclass(frozen=True)
class Decision:
    """A verdict, why, and who decided (``ladder`` or the evaluator's name)."""

    verdict: Verdict
    reason: str
    evaluator: str = "ladder"
    note: str | None = None
