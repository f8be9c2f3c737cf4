"""Watchdog evaluators the process tests name in LEASEHOLD_WATCHDOG_EVALUATOR."""

from __future__ import annotations

import time
from typing import Any

# long enough for a person (or a browser test) to see the wait banner
SLOW_JUDGE_S = 2.0


def escalate(evidence: dict[str, Any]) -> dict[str, str]:
    """Always hand the decision to a person."""
    return {"verdict": "ESCALATE", "reason": f"{evidence['kind']} needs a person"}


def slow_renew(evidence: dict[str, Any]) -> dict[str, str]:
    """Think for a while, then let the operation go on: a wait that stays visible."""
    time.sleep(SLOW_JUDGE_S)
    return {"verdict": "RENEW", "reason": f"{evidence['subject']} is slow, not dead"}
