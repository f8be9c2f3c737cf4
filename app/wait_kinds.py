"""What a run waits for, in words: the CLI's reading of the one table of wait kinds.

The table is ``app/console/assets/wait_kinds.json``: one entry per kind of ``wait``
event the scripts and the executor write (a durable sleep, a signal, a person, a join,
a delayed start, a concurrency slot, a singleton key, a rate limit, a pinned build,
Redis memory) and per ``waiting_for`` kind of a parked run, each with its title, its
words and the field that holds its deadline. The console serves the same file and
reads it in ``describe.js``; this module and that one are the table's only two
readers, and they render its templates by the same rules (the table's ``about``
says them), so a terminal and a browser say the same thing about the same wait.

An operation's wait (``ctx.operation`` past its lease) carries the operation's own
kind (``model``, ``tool_call`` …), a name a handler chooses: it is recognised by the
fields only an operation's wait has (``match_fields``), before its kind is looked up.
A kind the table does not know — a newer writer, an older reader — gets the table's
``unknown`` words, which name the kind and its subject and never make up numbers.

Times of day are UTC, as every other line ``runs watch`` prints.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).resolve().parent / "console" / "assets" / "wait_kinds.json"
# an optional part, "[ ... ]", or one field, "{name}" / "{name:format}"
_PART = re.compile(r"\[([^\[\]]*)\]|\{(\w+)(?::(\w+))?\}")
_FIELD = re.compile(r"\{(\w+)(?::\w+)?\}")


@cache
def table() -> dict[str, Any]:
    """The table of wait kinds, read once per process."""
    loaded: dict[str, Any] = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return loaded


def entry_for(data: dict[str, Any]) -> dict[str, Any]:
    """The table's entry for one wait: an operation's by its fields, else by kind."""
    kinds = table()
    operation: dict[str, Any] = kinds["operation"]
    if all(_present(data.get(field)) for field in operation["match_fields"]):
        return operation
    known: dict[str, Any] | None = kinds["kinds"].get(str(data.get("kind")))
    return known if known is not None else kinds["unknown"]


def wait_words(data: dict[str, Any]) -> str:
    """One wait (a ``wait`` event's data, or a parked run's ``waiting_for``) in words."""
    entry = entry_for(data)
    chosen = entry
    for variant in entry.get("variants", ()):
        if _present(data.get(variant["when"])):
            chosen = variant
            break
    names = {**entry.get("names", {}), **chosen.get("names", {})}
    return fill(chosen["words"], data, names)


def wait_title(data: dict[str, Any]) -> str:
    """The wait's short title (the console's banner heading)."""
    return fill(entry_for(data)["title"], data, {})


def deadline_ms(data: dict[str, Any]) -> float | None:
    """The epoch ms the wait ends by at the latest, when its kind has a deadline."""
    field = entry_for(data).get("deadline")
    return _number(data.get(field)) if field else None


def blocked_on_words(resource: str) -> str:
    """A queued run's ``blocked_on`` (``k:tenant-a``, ``b:v2`` …) in words."""
    kind, colon, name = resource.partition(":")
    blocked: dict[str, str] = table()["blocked_on"]
    if colon and kind in blocked and kind != "unknown":
        return fill(blocked[kind], {"name": name}, {})
    return fill(blocked["unknown"], {"name": resource}, {})


def fill(template: str, data: dict[str, Any], names: dict[str, dict[str, str]]) -> str:
    """A template of the table with ``data``'s fields in it (the table's ``about``)."""

    def part(match: re.Match[str]) -> str:
        optional, field, form = match.groups()
        if optional is not None:
            inside = _FIELD.findall(optional)
            if not all(_present(data.get(name)) for name in inside):
                return ""
            return fill(optional, data, names)
        return _formatted(data.get(field), form, names.get(field, {}))

    return _PART.sub(part, template)


def _present(value: object) -> bool:
    return value is not None and value is not False and value != ""


def _formatted(value: object, form: str | None, names: dict[str, str]) -> str:
    if not _present(value):
        return "?"
    if isinstance(value, str) and value in names:
        return names[value]
    number = _number(value)
    if form == "clock" and number is not None:
        return datetime.fromtimestamp(number / 1000, tz=UTC).strftime("%H:%M:%S")
    if form == "duration_ms" and number is not None:
        return duration(number)
    if form == "duration_s" and number is not None:
        return duration(number * 1000)
    if form == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if number is not None and number.is_integer():
        return str(int(number))
    return str(value)


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def duration(ms: float) -> str:
    """A duration as the console's ``duration`` says it: 850 ms, 4.2 s, 3 min 5 s, 2 h 4 min."""
    if ms < 1000:
        return f"{int(max(0.0, ms) + 0.5)} ms"
    s = ms / 1000
    if s < 60:
        # a tie of the exact binary value rounds up, as toFixed(1) does; format() would not
        return f"{Decimal(s).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int((s % 3600) // 60)} min"
