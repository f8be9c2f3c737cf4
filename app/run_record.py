"""A run as ``runs get`` prints it, read from the API's JSON without pydantic.

pydantic with :mod:`app.models` is ~0.1 s of a ``leasehold runs get``'s start-up on
this machine (issue 19: <= 300 ms), spent to check an answer the API built from the
same model. :func:`decode` reads that answer into a :class:`RunRecord` with the
attributes of :class:`app.models.Run` and :func:`dump_json` writes what
``Run.model_dump_json()`` writes, byte for byte. Both are strict: a value that is not
exactly what the API writes (an int for a str, a time in another form, a float
pydantic would print differently) makes them answer ``None``, and the caller gives the
answer to pydantic, whose result (or refusal) it prints as before. So this module
never has to know pydantic's coercions, only the canonical forms.

:data:`FIELDS` is the one list of the fields, in the model's order, with each one's
kind and default; ``tests/test_run_record.py`` holds it to ``Run.model_fields`` and
compares both readers over generated answers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.statuses import RunStatus

REQUIRED = object()
NOT_CANONICAL = object()
# the times pydantic writes (and reads back to the same datetime): RFC 3339 with a
# "T", up to microseconds, "Z" or an offset in minutes
_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
    r"(?:Z|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)
_ON_LEASE_EXPIRED = ("orphan", "retry")
_STATUSES = frozenset(RunStatus)
_MAX_EXACT_INT = 2**53


def _text(value: object) -> object:
    return value if type(value) is str else NOT_CANONICAL


def _integer(value: object) -> object:
    return value if type(value) is int else NOT_CANONICAL


def _number(value: object) -> object:
    """A float field: JSON gives an int for a whole number; pydantic makes it a float."""
    if type(value) is int and abs(value) <= _MAX_EXACT_INT:
        return float(value)
    return value if type(value) is float and math.isfinite(value) else NOT_CANONICAL


def _time(value: object) -> object:
    if type(value) is not str or not _TIME.fullmatch(value):
        return NOT_CANONICAL
    try:
        return datetime.fromisoformat(value)
    except ValueError:  # 25:00, 2026-02-30, an offset of 24 hours: pydantic's to judge
        return NOT_CANONICAL


def _anything(value: object) -> object:
    return value


def _object(value: object) -> object:
    return dict(value) if type(value) is dict else NOT_CANONICAL


def _status(value: object) -> object:
    if type(value) is str and value in _STATUSES:
        return RunStatus(value)
    return NOT_CANONICAL


def _on_lease_expired(value: object) -> object:
    return value if value in _ON_LEASE_EXPIRED and type(value) is str else NOT_CANONICAL


def _error(value: object) -> object:
    if type(value) is not dict:
        return NOT_CANONICAL
    code, message = _text(value.get("code")), _text(value.get("message"))
    retryable = value.get("retryable", False)
    details = _object(value.get("details", {}))
    if NOT_CANONICAL in (code, message, details) or type(retryable) is not bool:
        return NOT_CANONICAL
    return RunErrorRecord(code, message, retryable, details)  # type: ignore[arg-type]


# (name, reader, nullable, default) in Run's order; REQUIRED: no default; dict: a new {}
FIELDS: tuple[tuple[str, Callable[[object], object], bool, object], ...] = (
    ("id", _text, False, REQUIRED),
    ("queue", _text, False, REQUIRED),
    ("handler", _text, False, REQUIRED),
    ("status", _status, False, REQUIRED),
    ("input", _anything, True, None),
    ("output", _anything, True, None),
    ("error", _error, True, None),
    ("attempt", _integer, False, 1),
    ("max_attempts", _integer, False, 1),
    ("on_lease_expired", _on_lease_expired, False, "orphan"),
    ("owner_id", _text, True, None),
    ("fence", _integer, False, 0),
    ("lease_expires_at", _time, True, None),
    ("lease_ttl_ms", _integer, True, None),
    ("created_at", _time, False, REQUIRED),
    ("started_at", _time, True, None),
    ("first_started_at", _time, True, None),
    ("finished_at", _time, True, None),
    ("cancel_requested_at", _time, True, None),
    ("idempotency_key", _text, True, None),
    ("metadata", _object, False, dict),
    ("last_event_id", _text, True, None),
    ("retention_s", _number, True, None),
    ("escalation", _object, True, None),
    ("waiting_for", _object, True, None),
    ("schedule_id", _text, True, None),
    ("fire_at", _time, True, None),
    ("run_at", _time, True, None),
    ("retry_of", _text, True, None),
    ("retried_by", _text, True, None),
    ("concurrency_key", _text, True, None),
    ("singleton_key", _text, True, None),
    ("priority", _integer, False, 0),
    ("blocked_on", _text, True, None),
    ("parent_id", _text, True, None),
    ("root_id", _text, True, None),
    ("depth", _integer, False, 0),
)
ERROR_FIELDS = ("code", "message", "retryable", "details")


class RunErrorRecord:
    """``Run.error`` (:class:`app.models.RunError`) as plain attributes."""

    __slots__ = ERROR_FIELDS

    def __init__(self, code: str, message: str, retryable: bool, details: dict[str, Any]) -> None:
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details = details


class RunRecord:
    """A run with :class:`app.models.Run`'s attributes (what ``print_run`` reads)."""

    __slots__ = (*(name for name, *_ in FIELDS), "_json")

    id: str
    queue: str
    handler: str
    status: RunStatus
    input: Any
    output: Any
    error: RunErrorRecord | None
    attempt: int
    max_attempts: int
    fence: int
    owner_id: str | None
    lease_expires_at: datetime | None
    run_at: datetime | None
    retry_of: str | None
    retried_by: str | None
    escalation: dict[str, Any] | None
    waiting_for: dict[str, Any] | None
    _json: str

    def model_dump_json(self) -> str:
        """What ``Run.model_dump_json()`` writes for this run (:func:`dump_json`)."""
        return self._json


def decode(body: object) -> RunRecord | None:
    """The API's JSON for a run as a :class:`RunRecord`; ``None``: pydantic must read it.

    Keys the model does not know are ignored, as the model ignores them. ``None`` too
    when :func:`dump_json` cannot promise pydantic's bytes for it, so a record can
    always be printed either way.
    """
    if type(body) is not dict:
        return None
    record = RunRecord()
    for name, read, nullable, default in FIELDS:
        if name not in body:
            if default is REQUIRED:
                return None
            value = {} if default is dict else default
        elif body[name] is None and nullable:
            value = None
        else:
            value = read(body[name])
            if value is NOT_CANONICAL:
                return None
        setattr(record, name, value)
    text = dump_json(record)
    if text is None:
        return None
    record._json = text
    return record


def dump_json(record: RunRecord) -> str | None:
    """What ``Run.model_dump_json()`` writes for the same run; ``None``: let pydantic.

    Every field in the model's order, compact, UTF-8 as is; times as pydantic writes
    them; floats in pydantic's form (Python's, except exponents -5 to -9).
    """
    try:
        parts = [f"{json.dumps(name)}:{_json(getattr(record, name))}" for name, *_ in FIELDS]
    except _Unwritable:
        return None
    return "{" + ",".join(parts) + "}"


class _Unwritable(Exception):
    """A value whose pydantic form this module does not promise (pydantic writes it)."""


def _json(value: object) -> str:  # noqa: C901 - one branch per JSON type, as pydantic's
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is str:
        return _string(value)
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return _float(value)
    if isinstance(value, RunStatus):
        return _string(value.value)
    if type(value) is datetime:
        return _string(_time_text(value))
    if type(value) is dict:
        return "{" + ",".join(f"{_key(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if type(value) is list:
        return "[" + ",".join(_json(item) for item in value) + "]"
    if type(value) is RunErrorRecord:
        return "{" + ",".join(f'"{n}":{_json(getattr(value, n))}' for n in ERROR_FIELDS) + "}"
    raise _Unwritable


def _key(key: object) -> str:
    if type(key) is not str:
        raise _Unwritable
    return _string(key)


def _string(text: str) -> str:
    """JSON text as pydantic writes it: UTF-8 kept, controls as ``\\uXXXX`` or short forms."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: pydantic's to refuse or write
            raise _Unwritable from None
    return json.dumps(text, ensure_ascii=False)


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise _Unwritable
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if not exponent.startswith("-0"):
        return text
    if exponent == "-05":  # pydantic writes 1.5e-05 as 0.000015
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e-{exponent[2:]}"


def _time_text(value: datetime) -> str:
    """A time as pydantic writes it: microseconds only when set, UTC as ``Z``."""
    offset = value.utcoffset()
    if offset is None or offset.seconds % 60 or offset.microseconds:
        raise _Unwritable
    text = value.replace(tzinfo=None).isoformat()
    if not offset:
        return text + "Z"
    return text + value.isoformat()[-6:]
