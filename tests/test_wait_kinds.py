"""The table of wait kinds: every wait the system writes has its own words in it.

The CLI's reader (:mod:`app.wait_kinds`) is held here to the words of
``tests/support/waits.py``; the console's reader is held to the same words in Chromium
(``tests/console/test_wait_words.py``). The writers are read too: a kind a Lua script or
the executor writes that the table does not know fails here, before a person sees it
told generically.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.render import DESCRIBE
from app.wait_kinds import (
    blocked_on_words,
    deadline_ms,
    entry_for,
    table,
    wait_title,
    wait_words,
)
from tests.support.waits import AT_MS, BLOCKED_ON, WAITS

REPO = Path(__file__).resolve().parents[1]
# what a wait written by a script or the executor may be called
LUA_KIND = re.compile(r"kind = '([a-z_]+)'")
PY_KIND = re.compile(r'"kind": "([a-z_]+)"')
# the park_run kinds (an enum argument) and claim's two (chosen by the resource's letter)
ARGUMENT_KINDS = {"sleep", "signal", "human", "singleton", "concurrency_limit"}
NOT_WAITS = {"retry", "run"}  # an operation's retry record and a step's: not waits


@pytest.mark.parametrize(("name", "data", "words"), WAITS, ids=[name for name, _, _ in WAITS])
def test_every_wait_reads_in_its_own_words(name: str, data: dict[str, Any], words: str) -> None:
    assert wait_words(data) == words
    assert DESCRIBE["wait"](data) == words  # what `runs watch` prints for the event


def test_no_wait_reads_as_made_up_numbers() -> None:
    for _, data, _ in WAITS:
        said = wait_words(data) + " " + wait_title(data)
        assert not re.search(r"\bNone\b|\bundefined\b|\bnull\b|\bNaN\b|\?", said), said


def test_every_kind_in_the_table_has_an_example_and_every_written_kind_is_in_the_table() -> None:
    examples = {str(data.get("kind")) for _, data, _ in WAITS}
    assert set(table()["kinds"]) <= examples
    written = set(ARGUMENT_KINDS)
    for script in (REPO / "scripts" / "lua").rglob("*.lua"):
        written |= set(LUA_KIND.findall(script.read_text()))
    for module in (REPO / "app").rglob("*.py"):
        written |= set(PY_KIND.findall(module.read_text()))
    assert written - NOT_WAITS == set(table()["kinds"])


def test_an_operation_is_told_by_its_fields_and_an_unknown_kind_generically() -> None:
    operation = {"kind": "signal", "subject": "x", "elapsed_s": 1, "renewals": 0, "lease_s": 1}
    assert entry_for(operation) is table()["operation"]
    assert wait_title(operation) == "Waiting on signal x"
    assert entry_for({"kind": "event"}) is table()["unknown"]
    assert wait_title({"kind": "event"}) == "Waiting on event"
    assert wait_title({}) == "Waiting"


def test_a_deadline_is_the_kinds_own_field_and_only_a_number() -> None:
    assert deadline_ms({"kind": "signal", "until_ms": AT_MS}) == AT_MS
    assert deadline_ms({"kind": "signal", "until_ms": None}) is None
    assert deadline_ms({"kind": "human", "until_ms": AT_MS}) is None  # a question has none
    assert deadline_ms({"kind": "sleep", "until_ms": "soon"}) is None
    assert deadline_ms({"kind": "sleep", "until_ms": True}) is None


@pytest.mark.parametrize(("resource", "words"), BLOCKED_ON)
def test_blocked_on_reads_as_what_the_lane_waits_for(resource: str, words: str) -> None:
    assert blocked_on_words(resource) == words


def test_hostile_values_are_said_as_they_are_never_run_as_templates() -> None:
    said = wait_words(
        {"kind": "signal", "subject": "{kind} [x] {until_ms:clock}", "until_ms": None}
    )
    assert said == "parked until signal {kind} [x] {until_ms:clock} arrives; no lease held"
    said = wait_words({"kind": "__proto__", "subject": "é" * 3})
    assert said == "waiting on __proto__ ééé"
