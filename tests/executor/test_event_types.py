"""Event types a handler may emit: lower-case names only, and none of the lifecycle's."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import InvalidEvent
from app.executor.events import EventSink


def sink() -> EventSink:
    # validate() touches neither the store nor the run: pure checks before anything is queued
    nothing: Any = None
    return EventSink(nothing, nothing, max_event_bytes=1024, on_lost=lambda: None)


@pytest.mark.parametrize(
    "event_type",
    [
        *["token\n", "token\r\n", "tok\nen", "Token", "", "x" * 65, "1token", "to ken"],
        *["succeeded", "signal", "priority_changed", "child_ended", "tree_ended", "tree_truncated"],
    ],
)
def test_a_malformed_or_reserved_type_is_refused(event_type: str) -> None:
    with pytest.raises(InvalidEvent):
        sink().validate(event_type, {})


@pytest.mark.parametrize("event_type", ["token", "note", "tool.call", "a-b_c", "x" * 64])
def test_a_well_formed_type_is_accepted(event_type: str) -> None:
    assert sink().validate(event_type, {"k": 1}) == '{"k":1}'
