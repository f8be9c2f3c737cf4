"""Renders a run's event stream for a person reading a terminal.

Token events flow inline as text; every other event gets one readable line,
prefixed with its time and the fence it was written under. The terminal event
says how the run ended and why, in the words :func:`error_words` gives a run's
error wherever the CLI shows one; a ``wait`` says what the run waits for in the
words of the table of wait kinds (:mod:`app.wait_kinds`), the console's too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from app.statuses import TERMINAL_EVENT_TYPES
from app.wait_kinds import wait_words

if TYPE_CHECKING:
    from app.models import RunEvent


def error_words(code: str | None, message: str | None) -> str:
    """A run's error as a person reads it after the run's status: ``code: message``.

    The message alone when it already says what its code says (``lease_expired``,
    ``executor lease expired``), so an orphaned run reads ``orphaned: executor lease
    expired`` and never ``orphaned: lease_expired: executor lease expired``; the code
    alone when there is no message. ``runs get``, ``runs watch``, the listings and the
    demo's endings all word an error here (the console's ``errorText`` in
    ``app/console/assets/describe.js`` keeps the same rule).
    """
    code = code or "error"
    if not message:
        return code
    if code.replace("_", " ") in message.lower():
        return message
    return f"{code}: {message}"


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False) if data else ""


def _error_text(data: dict[str, Any]) -> str:
    error = data.get("error") or {}
    text = error_words(error.get("code"), error.get("message"))
    details = error.get("details") or {}
    if details.get("owner_id"):
        text += f" (owner {details['owner_id']}, fence {details.get('fence')})"
    return text


def _describe_requeued(data: dict[str, Any]) -> str:
    reason = data.get("reason", "")
    line = f"requeued for attempt {data.get('attempt')} ({reason})"
    if data.get("error"):
        line += f" after {error_words(data['error'].get('code'), data['error'].get('message'))}"
    return line


def _describe_effect(data: dict[str, Any]) -> str:
    line = f"effect {data.get('key')} {data.get('phase')}"
    if data.get("phase") == "started" and (data.get("starts") or 1) > 1:
        line += f" again (start {data['starts']}, idempotent)"
    return line


def _describe_resolved(data: dict[str, Any]) -> str:
    line = f"resolved by a person: {data.get('action')}"
    if data.get("effect_outcome"):
        line += f", effects {data['effect_outcome']}"
    if data.get("note"):
        line += f" ({data['note']})"
    return line


def _clock(epoch_ms: object) -> str:
    """Epoch ms from Redis as a wall-clock time of day (UTC), or '?'."""
    if not isinstance(epoch_ms, int | float):
        return "?"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


DESCRIBE: dict[str, Callable[[dict[str, Any]], str]] = {
    "created": lambda d: (
        f"created: handler {d.get('handler')} on queue {d.get('queue')}"
        + (f", re-run of {d['retry_of']}" if d.get("retry_of") else "")
    ),
    "claimed": lambda d: f"claimed by {d.get('owner_id')} (attempt {d.get('attempt')})",
    "progress": lambda d: f"progress {_compact(d)}",
    "cancel_requested": lambda d: f"cancel requested (owner {d.get('owner_id')})",
    "released": lambda d: f"released by {d.get('owner_id')} ({d.get('reason')})",
    "lease_expired": lambda d: (
        f"{d.get('owner_id')} stopped renewing at {_clock(d.get('last_renewed_at_ms'))}; "
        f"its lease ran out at {_clock(d.get('lease_expires_at_ms'))}"
    ),
    "requeued": _describe_requeued,
    "checkpoint": lambda d: f"checkpoint {d.get('seq')} ({d.get('size_bytes')} bytes)",
    "effect": _describe_effect,
    "waiting_human": lambda d: (
        f"asks a person: {json.dumps(d.get('question'))}"
        if d.get("reason") == "ask_human"
        else f"waiting for a person: {d.get('reason')}"
    ),
    "signal": lambda d: (
        f"signal {d.get('name')} delivered: the run wakes"
        if d.get("delivered")
        else f"signal {d.get('name')} kept for a later wait ({d.get('pending')} unread)"
    ),
    "resumed": lambda d: f"resumed by a person, input {json.dumps(d.get('input'))}",
    "reconciliation_required": lambda d: f"needs a person: {_error_text(d)}",
    "resolved": _describe_resolved,
    "replay_unavailable": lambda d: (
        f"history before {d.get('oldest_available')} was trimmed; showing what remains"
    ),
    "wait": wait_words,
    "verdict": lambda d: (
        f"watchdog: {d.get('verdict')} ({d.get('reason')}) after {d.get('renewals')} renewals"
    ),
    "succeeded": lambda d: "succeeded",
    "failed": lambda d: f"failed: {_error_text(d)}",
    "orphaned": lambda d: f"orphaned: {_error_text(d)}",
    "cancelled": lambda d: f"cancelled ({d.get('reason', 'requested')})",
    "expired": lambda d: (
        f"expired: nobody claimed it within its queued time-to-live "
        f"(queued {int(d.get('queued_for_ms') or 0) / 1000:g} s)"
    ),
}


class EventPrinter:
    """Writes events to ``out`` as they arrive; tokens inline, the rest one per line."""

    def __init__(self, out: TextIO, *, name_runs: bool = False) -> None:
        self._out = out
        self._in_tokens = False
        # a tree stream interleaves runs: each line names its run, tokens go one per line
        self._name_runs = name_runs

    def show(self, event: RunEvent) -> None:
        """Print one event."""
        if event.type == "token" and not self._name_runs:
            self._out.write(str(event.data.get("text", "")))
            self._in_tokens = True
            self._out.flush()
            return
        if self._in_tokens:
            self._out.write("\n")
            self._in_tokens = False
        describe = DESCRIBE.get(event.type)
        text = describe(event.data) if describe else f"{event.type} {_compact(event.data)}"
        marker = "==" if event.type in TERMINAL_EVENT_TYPES else "--"
        run = f"{event.run_id}  " if self._name_runs else ""
        self._out.write(f"{event.ts:%H:%M:%S} {marker} {run}{text}  [fence {event.fence}]\n")
        self._out.flush()
