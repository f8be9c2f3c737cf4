"""The stored JSON text of a parsed value is the same whichever encoder wrote it.

``dumps_parsed`` (the API's encoder for request inputs) must give exactly ``dumps``'
text: idempotent replays compare fingerprints built from it with those of runs stored
by older code. Checked on hand-picked documents, on every value kind a JSON parser
makes (generated), and on the texts themselves (generated JSON, parsed, encoded both ways).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.codec import dumps, dumps_parsed

DOCUMENTS = [
    "{}",
    "[]",
    '""',
    '"plain"',
    '"quote \\" backslash \\\\ newline \\n control \\u0001 line sep \\u2028 é ☃ 😀"',
    '"\\u0000 \\u001f \\u007f \\u0080 \\u00ff \\ufeff \\uffff \\ud83d\\ude00"',
    '"lone \\ud800 surrogate"',
    "0",
    "-17",
    "123456789012345678901234567890",
    "-" + "9" * 4000,
    "1.5",
    "1e16",
    "1E-7",
    "0.1",
    "-0.0",
    "2.5e300",
    "5e-324",
    "1.7976931348623157e308",
    "1e400",
    "-1e400",
    "NaN",
    "123456789012345678.0",
    "true",
    "false",
    "null",
    '{"a": [1, {"b": null}], "é": "☃", "": {}, "n": [[[]]]}',
    '{"dup": 1, "dup": 2}',
    '{"😀": 1, "\\u2028": 2, "\\"": 3, "\\u0000": [], "ключ": {"键": "値"}}',
    '{"b": 1, "a": 2, "c": {"z": 0, "y": 1}}',
    '[1.0, "x", {"k": [true, false, null]}]',
    "[" * 200 + "]" * 200,
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_parsed_value_is_encoded_as_dumps_encodes_it(document: str) -> None:
    value = json.loads(document)
    assert dumps_parsed(value) == dumps(value)


# every value kind json.loads makes: str (any code point, lone surrogates included), int of
# any size, float (NaN, ±inf, -0.0, subnormals), bool, None, list, dict with str keys
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
    | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e16, 0.1])
    | st.text(alphabet=st.characters(codec=None, categories=None))
    | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
)
PARSED = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.text(alphabet=st.characters(codec=None)), children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=250, deadline=None)
@given(PARSED)
def test_every_kind_of_parsed_value_is_encoded_as_dumps_encodes_it(value: Any) -> None:
    assert dumps_parsed(value) == dumps(value)


@settings(max_examples=100, deadline=None)
@given(PARSED)
def test_the_text_of_a_document_parsed_again_is_encoded_as_dumps_encodes_it(value: Any) -> None:
    document = json.dumps(value, ensure_ascii=True, indent=1)  # another form of the same value
    parsed = json.loads(document)
    assert dumps_parsed(parsed) == dumps(parsed)


def _character_kind(code: int) -> str | None:
    if 0xD800 <= code <= 0xDFFF:
        return "surrogate"
    if code > 0xFFFF:
        return "astral"
    return "control" if code < 0x20 else None


_CHARACTER_KINDS = {
    chr(c): kind for c in range(sys.maxunicode + 1) if (kind := _character_kind(c)) is not None
}


def test_the_generated_values_reach_every_kind() -> None:
    """Guards the strategy above: a PARSED that stopped generating a kind would hide it."""
    kinds: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(PARSED)
    def collect(value: Any) -> None:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, float):
                kinds.add("nan" if math.isnan(item) else "inf" if math.isinf(item) else "float")
            elif isinstance(item, int) and not isinstance(item, bool):
                kinds.add("big int" if abs(item) > sys.maxsize else "int")
            elif isinstance(item, str):
                kinds.add("ascii" if item.isascii() else "non-ascii")
                kinds.update(_CHARACTER_KINDS[c] for c in item if c in _CHARACTER_KINDS)
            elif isinstance(item, dict):
                kinds.add("dict")
                kinds.update("non-ascii key" for key in item if not key.isascii())
                stack.extend(item.values())
            elif isinstance(item, list):
                kinds.add("list")
                stack.extend(item)
            else:
                kinds.add(type(item).__name__)

    collect()
    assert kinds >= {
        "nan",
        "inf",
        "float",
        "int",
        "big int",
        "ascii",
        "non-ascii",
        "dict",
        "non-ascii key",
        "list",
        "bool",
        "NoneType",
        "surrogate",
        "astral",
        "control",
    }


def test_a_nesting_too_deep_for_either_is_refused_by_both() -> None:
    deep: Any = []
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    with pytest.raises(RecursionError):
        dumps(deep)
    with pytest.raises(RecursionError):
        dumps_parsed(deep)


def test_non_json_values_are_refused_as_dumps_refuses_them() -> None:
    with pytest.raises(TypeError):
        dumps(object())
    with pytest.raises(TypeError):
        dumps_parsed(object())
    with pytest.raises(TypeError):
        dumps_parsed({"a": [1, {"b": {1, 2}}]})
