"""The stored JSON text of a parsed value is the same whichever encoder wrote it.

``dumps_parsed`` (the API's encoder for request inputs) must give exactly ``dumps``'
text: idempotent replays compare fingerprints built from it with those of runs stored
by older code.
"""

from __future__ import annotations

import json

import pytest

from app.store.codec import dumps, dumps_parsed

DOCUMENTS = [
    "{}",
    "[]",
    '"plain"',
    '"quote \\" backslash \\\\ newline \\n control \\u0001 line sep \\u2028 é ☃ 😀"',
    "0",
    "-17",
    "123456789012345678901234567890",
    "1.5",
    "1e16",
    "1E-7",
    "0.1",
    "-0.0",
    "2.5e300",
    "true",
    "false",
    "null",
    '{"a": [1, {"b": null}], "é": "☃", "": {}, "n": [[[]]]}',
    '{"dup": 1, "dup": 2}',
    '[1.0, "x", {"k": [true, false, null]}]',
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_parsed_value_is_encoded_as_dumps_encodes_it(document: str) -> None:
    value = json.loads(document)
    assert dumps_parsed(value) == dumps(value)


def test_non_json_values_are_refused_as_dumps_refuses_them() -> None:
    with pytest.raises(TypeError):
        dumps(object())
    with pytest.raises(TypeError):
        dumps_parsed(object())
