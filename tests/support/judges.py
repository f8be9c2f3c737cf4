"""Watchdog evaluators the process tests name in LEASEHOLD_WATCHDOG_EVALUATOR."""

from __future__ import annotations

from typing import Any


def escalate(evidence: dict[str, Any]) -> dict[str, str]:
    """Always hand the decision to a person."""
    return {"verdict": "ESCALATE", "reason": f"{evidence['kind']} needs a person"}
