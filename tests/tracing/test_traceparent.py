"""W3C traceparent parsing and the derived attempt contexts (pure logic)."""

from __future__ import annotations

import pytest

from app.telemetry.tracing import TRACEPARENT_MAX_CHARS, attempt_traceparent, parse_traceparent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_kept_and_lowercased() -> None:
    assert parse_traceparent(VALID) == VALID
    assert parse_traceparent(VALID.upper()) == VALID
    assert parse_traceparent(f"  {VALID} ") == VALID


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has 4 fields
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  # not hex
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        VALID + "-" + "a" * TRACEPARENT_MAX_CHARS,  # past the bound
        "00-\u0664bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # a non-ASCII digit
    ],
)
def test_anything_else_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None


def test_a_future_version_is_read_by_its_first_four_fields() -> None:
    future = "01" + VALID[2:] + "-what-comes-later"
    assert parse_traceparent(future) == "01" + VALID[2:]


def test_an_attempt_continues_the_runs_trace_with_a_span_id_of_its_fence() -> None:
    first = attempt_traceparent("default.01J", 1, VALID)
    again = attempt_traceparent("default.01J", 1, VALID)
    taken_over = attempt_traceparent("default.01J", 3, VALID)
    assert first == again  # any process derives the same context
    assert first.split("-")[1] == taken_over.split("-")[1] == VALID.split("-")[1]
    assert first.split("-")[2] != taken_over.split("-")[2]
    assert parse_traceparent(first) == first


def test_a_run_without_a_trace_context_still_keeps_its_attempts_in_one_trace() -> None:
    first = attempt_traceparent("default.01J", 1, None)
    second = attempt_traceparent("default.01J", 2, "not a traceparent")
    other_run = attempt_traceparent("default.01K", 1, None)
    assert first.split("-")[1] == second.split("-")[1] != other_run.split("-")[1]
    assert parse_traceparent(first) == first
