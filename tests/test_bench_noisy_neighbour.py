"""The noisy-neighbour benchmark's pure parts (bench.noisy_neighbour) count what they say.

The benchmark itself starts a stack and takes minutes; what could silently skew its
table is here: how an answer is counted (a 429 by the quota its problem names), how
a tenant-B create becomes its spans (a run without a handler stamp must not count
as a fast start), and the options as the BENCHMARKS.md command passes them.
"""

from __future__ import annotations

import argparse
import json

import pytest

from bench.noisy_neighbour import (
    Send,
    markdown_table,
    outcome,
    parse_args,
    parse_quotas,
    summarize,
)


def test_a_429_is_counted_by_the_quota_its_problem_names() -> None:
    body = json.dumps({"type": "quota-exceeded", "quota": "creates_per_s", "limit": 50})
    assert outcome(429, body.encode()) == "429 creates_per_s"
    assert outcome(429, b"not json") == "429"
    assert outcome(429, b"[]") == "429"
    assert outcome(201, b"{}") == "201"


def test_quotas_parse_as_put_namespaces_takes_them() -> None:
    args = parse_args(["--a-quotas", "creates_per_s=10, schedules=0", "--seconds", "5"])
    assert args.a_quotas == {"creates_per_s": 10, "schedules": 0}
    assert args.seconds == 5.0
    assert parse_args([]).a_quotas == {
        "creates_per_s": 50,
        "live_runs": 500,
        "schedules": 5,
        "listings_in_flight": 1,
    }
    assert parse_args(["--a-quotas", ""]).a_quotas == {}


def test_a_quota_without_a_value_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--a-quotas", "creates_per_s"])
    with pytest.raises(argparse.ArgumentTypeError):
        parse_quotas("=5")


def test_spans_come_from_the_stamp_and_the_record_on_one_clock() -> None:
    sent = 1_000.0
    sends = [
        Send(sent, sent + 0.010, "201", "r1"),
        Send(sent + 1, sent + 1.020, "201", "r2"),  # ran, but its stamp never came
        Send(sent + 2, sent + 2.005, "429 creates_per_s", None),
    ]
    runs = {
        "r1": {
            "status": "succeeded",
            "created_at": "1970-01-01T00:16:40.004000+00:00",  # sent + 4 ms
            "started_at": "1970-01-01T00:16:40.004000+00:00",
        },
        "r2": {"status": "failed", "created_at": "1970-01-01T00:16:41.003000+00:00"},
    }
    phase = summarize(sends, runs, {sent: sent + 0.006}, seconds=2.0)
    assert phase["attempts"] == 3
    assert phase["answers"] == {"201": 2, "429 creates_per_s": 1}
    assert (phase["created"], phase["succeeded"], phase["handler_stamps"]) == (2, 1, 1)
    assert phase["create_success"] == round(2 / 3, 4)
    assert phase["run_success"] == 0.5
    assert phase["requests_per_s"] == 1.5
    assert phase["sent_to_handler_ms"]["p50"] == pytest.approx(6.0, abs=0.1)
    assert phase["sent_to_created_ms"]["max"] == pytest.approx(4.0, abs=0.1)
    assert phase["created_to_handler_ms"]["p99"] == pytest.approx(2.0, abs=0.1)
    assert phase["post_ms"]["max"] == pytest.approx(20.0, abs=0.1)


def test_the_table_has_a_row_per_phase_and_tenant_a_s_answers() -> None:
    tenant_b = summarize([Send(1.0, 1.01, "201", None)], {}, {}, seconds=1.0)
    cpu = {"redis": 0.1, "api": 0.2, "worker tenant-a": 0.3, "worker tenant-b": 0.4}
    base = {"phase": "baseline", "load_before": (1.0, 1.0, 1.0), "tenant_b": tenant_b}
    noisy_a = {"answers": {"create 201": 5}, "requests_per_s": 9.0, "client_cpu_s": 0.5}
    table = markdown_table(
        [
            {**base, "tenant_a": None, "cpu_s": cpu},
            {**base, "phase": "noisy", "tenant_a": noisy_a, "cpu_s": cpu},
        ]
    )
    lines = table.splitlines()
    assert lines[2].startswith("| baseline | 1.00 | - / - / - |")
    assert lines[3].startswith("| noisy |")
    assert "0.1 / 0.2 / 0.3 / 0.4" in lines[2]
    assert lines[-1] == "| 1 | create 201: 5 | 9.0 | 0.5 |"
