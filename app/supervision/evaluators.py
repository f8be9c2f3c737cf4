"""Optional evaluators the watchdog consults for silent operations.

Two kinds: a Python callable named in settings (``module:function``, sync or
async, taking the evidence dict and returning a verdict), or an HTTP judge
(POST the evidence as JSON, read ``{"verdict": ..., "reason": ..., "note": ...}``).

Every call runs under its own hard timeout: a plain timeout, not a lease, because
an evaluator is a policy helper, not supervised work. *Any* failure — an
exception, a timeout, an answer that does not parse — yields RENEW: the
watchdog never kills by accident.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.supervision.verdicts import Decision, Evidence, Verdict

log = logging.getLogger(__name__)


class Evaluator(Protocol):
    """Something that can judge evidence; may raise or hang (the caller bounds it)."""

    name: str

    async def judge(self, evidence: Evidence) -> Any:
        """Return a verdict string, a dict with ``verdict``, or a :class:`Decision`."""


class CallableEvaluator:
    """A Python function ``module:function`` taking the evidence dict."""

    def __init__(self, path: str) -> None:
        module, _, attribute = path.partition(":")
        if not module or not attribute:
            raise ValueError(f"evaluator {path!r} must look like 'package.module:function'")
        self.name = path
        self._fn: Callable[[dict[str, Any]], Any] = getattr(
            importlib.import_module(module), attribute
        )

    async def judge(self, evidence: Evidence) -> Any:
        """Call the function; sync functions run in a thread so they cannot block the loop."""
        if inspect.iscoroutinefunction(self._fn):
            return await self._fn(evidence.as_dict())
        result = await asyncio.to_thread(self._fn, evidence.as_dict())
        if inspect.isawaitable(result):
            return await result
        return result


class HttpJudge:
    """POSTs the evidence to a URL and reads the verdict from the JSON answer."""

    def __init__(self, url: str) -> None:
        self.name = url
        self._url = url

    async def judge(self, evidence: Evidence) -> Any:
        """One POST; the caller's timeout bounds it, so httpx's own is generous."""
        # here: every worker imports this module, few configure an HTTP judge
        from app.httpx_import import httpx

        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0)) as client:
            response = await client.post(self._url, json=evidence.as_dict())
            response.raise_for_status()
            return response.json()


def parse_decision(answer: Any, evaluator: str) -> Decision:
    """Read an evaluator's answer; raises ValueError when it is not a known verdict."""
    if isinstance(answer, Decision):
        return answer
    note = None
    reason = "evaluator verdict"
    if isinstance(answer, dict):
        raw = answer.get("verdict")
        reason = str(answer.get("reason") or reason)
        note = answer.get("note")
    else:
        raw = answer
    verdict = Verdict(str(raw).strip().upper())
    return Decision(
        verdict, reason, evaluator=evaluator, note=str(note) if note is not None else None
    )


async def consult(evaluator: Evaluator, evidence: Evidence, *, timeout_s: float) -> Decision:
    """Ask the evaluator under a hard timeout; any failure becomes RENEW."""
    try:
        answer = await asyncio.wait_for(evaluator.judge(evidence), timeout=timeout_s)
        return parse_decision(answer, evaluator.name)
    except TimeoutError:
        reason = f"evaluator timed out after {timeout_s}s"
    except Exception as exc:  # the evaluator is foreign code: never let it kill by accident
        reason = f"evaluator failed: {type(exc).__name__}: {exc}"
    log.warning("watchdog evaluator %s: %s; renewing", evaluator.name, reason)
    return Decision(Verdict.RENEW, reason, evaluator=evaluator.name)


def load_evaluator(*, callable_path: str | None, judge_url: str | None) -> Evaluator | None:
    """The evaluator the settings name, if any (a callable wins over a URL)."""
    if callable_path:
        return CallableEvaluator(callable_path)
    if judge_url:
        return HttpJudge(judge_url)
    return None


EvaluatorFn = Callable[[dict[str, Any]], Any | Awaitable[Any]]
