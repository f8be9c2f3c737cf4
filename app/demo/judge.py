"""The demo's watchdog evaluator: hands silent approvals to a person.

``LEASEHOLD_WATCHDOG_EVALUATOR=app.demo.judge:escalate_approvals`` (``leasehold
demo escalate`` sets it on its private stack) makes the watchdog answer ESCALATE
when ``demo.approval``'s wait outlives its lease, so the run parks in
``waiting_human``. Anything else it is asked about is renewed: the ladder's
``max_renewals`` still bounds it.
"""

from __future__ import annotations

from typing import Any

from app.demo.handlers import APPROVAL_SUBJECT

EVALUATOR = "app.demo.judge:escalate_approvals"


def escalate_approvals(evidence: dict[str, Any]) -> dict[str, str]:
    """ESCALATE an approval nobody answered; RENEW anything else (the ladder bounds it)."""
    if evidence.get("subject") == APPROVAL_SUBJECT:
        return {"verdict": "ESCALATE", "reason": "an approval needs a person"}
    return {"verdict": "RENEW", "reason": "the demo judge escalates approvals only"}
