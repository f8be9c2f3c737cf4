"""What the handler registry refuses, and what a handler raises that is not a failure:
an event refused, an escalation to a person, a run given back to a rate limit."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from app.errors.base import LeaseholdError


class HandlerError(LeaseholdError):
    """A handler cannot be found or its input is not acceptable."""


class UnknownHandler(HandlerError):
    """No handler is registered under this name."""

    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        super().__init__(f"unknown handler {name!r}{_known_words(name, known)}")
        self.name = name


# how many known names an unknown-handler message lists at most (GET /handlers has all)
KNOWN_SHOWN = 10


def _known_words(name: str, known: Sequence[str]) -> str:
    """What an unknown name might have meant: the closest known names, else a few of them.

    A typo (``gret``) gets ``did you mean 'greet'?``; any other name the first
    KNOWN_SHOWN known ones, so the message stays one line whatever the registry holds.
    """
    if not known:
        return ""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.8)
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(sorted(known)[:KNOWN_SHOWN])
    more = (
        f" and {len(known) - KNOWN_SHOWN} more (GET /handlers)" if len(known) > KNOWN_SHOWN else ""
    )
    return f"; known: {shown}{more}"


class InvalidInput(HandlerError):
    """The run input does not validate against the handler's input model."""

    def __init__(self, handler: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"input for handler {handler!r} is invalid")
        self.handler = handler
        self.problems = problems


class InvalidHandlerDefaults(HandlerError, ValueError):
    """``@handler(...)`` was given defaults that cannot hold; raised when the module is imported.

    Raised at import time, not at the first run: a typo in ``max_attempts`` must stop
    the worker (and the API) from starting rather than surface hours later.
    """

    def __init__(self, handler: str, problems: list[str]) -> None:
        super().__init__(f"@handler({handler!r}) defaults are invalid: {'; '.join(problems)}")
        self.handler = handler
        self.problems = problems


class InvalidEvent(LeaseholdError):
    """A handler tried to emit an event that would corrupt its run's stream."""


class EventTooLarge(InvalidEvent):
    """A handler tried to emit an event whose payload exceeds the configured bound."""

    def __init__(self, event_type: str, size: int, limit: int) -> None:
        super().__init__(f"event {event_type!r} is {size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


class EscalationRequested(LeaseholdError):
    """The watchdog escalated an operation to a person: the run parks in ``waiting_human``.

    Not a failure: the worker releases the lease and stores the evidence; a person
    resumes the run (POST /runs/{id}/resume) and the handler is called again with
    ``ctx.resume_input``. Handlers should let it propagate.
    """

    def __init__(self, reason: str, *, evidence: dict[str, Any]) -> None:
        super().__init__(f"escalated to a person: {reason}")
        self.reason = reason
        self.evidence = evidence


class RateLimitRelease(LeaseholdError):
    """The handler gives its run back to the queue until a rate-limit bucket lets it in.

    Raised by ``ctx.rate_limited(..., release=True)`` after an upstream 429, and by
    ``ctx.rate_limit`` when the token is further away than LEASEHOLD_RATE_LIMIT_MAX_WAIT_S.
    Let it propagate: the worker releases the run (fence+1) to start again
    ``delay_ms`` later by the Redis clock, and the attempt is not counted.
    """

    def __init__(self, key: str, delay_ms: int, reason: str) -> None:
        super().__init__(f"rate-limited on {key!r}: the run is released for {delay_ms} ms")
        self.key = key
        self.delay_ms = delay_ms
        self.reason = reason
