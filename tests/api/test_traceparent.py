"""POST /runs keeps the caller's trace context with the run, traced or not."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import httpx
import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.errors import ConfigurationError
from app.settings import Settings
from app.store.keys import QueueKeys
from app.telemetry import tracing
from app.telemetry.logs import JsonFormatter
from app.telemetry.tracing import parse_traceparent, tracer

ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}
CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def stored_traceparent(client: aioredis.Redis, settings: Settings, run_id: str) -> str:
    value = await client.hget(QueueKeys(settings.prefix, "default").run(run_id), "traceparent")
    return (value.decode() if isinstance(value, bytes) else value) or ""


async def test_untraced_api_stores_the_callers_traceparent(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    created = await api.post("/runs", json=ECHO, headers={"traceparent": CALLER.upper()})
    assert created.status_code == 201
    assert await stored_traceparent(redis_client, settings, created.json()["id"]) == CALLER


@pytest.mark.parametrize(
    "header", ["garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", CALLER + "x" * 10_000]
)
async def test_a_malformed_traceparent_is_ignored_and_the_run_is_created(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings, header: str
) -> None:
    created = await api.post("/runs", json=ECHO, headers={"traceparent": header})
    assert created.status_code == 201
    assert await stored_traceparent(redis_client, settings, created.json()["id"]) == ""


async def test_traced_api_stores_its_create_span_as_a_child_of_the_caller(
    spans: InMemorySpanExporter,
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    created = await api.post("/runs", json=ECHO, headers={"traceparent": CALLER})
    run_id = created.json()["id"]
    (span,) = [s for s in spans.get_finished_spans() if s.name == "leasehold.create"]
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CALLER.split("-")[2]
    assert f"{span.context.trace_id:032x}" == CALLER.split("-")[1]
    assert span.attributes is not None and span.attributes["leasehold.run_id"] == run_id
    stored = await stored_traceparent(redis_client, settings, run_id)
    assert stored == f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-01"


async def test_traced_api_starts_a_trace_when_the_caller_sent_none(
    spans: InMemorySpanExporter,
    api: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    settings: Settings,
) -> None:
    created = await api.post("/runs", json=ECHO, headers={"traceparent": "garbage"})
    (span,) = spans.get_finished_spans()
    assert span.parent is None
    stored = await stored_traceparent(redis_client, settings, created.json()["id"])
    assert parse_traceparent(stored) is not None
    assert stored.split("-")[1] == f"{span.context.trace_id:032x}"


async def test_a_refused_create_ends_its_span_as_an_error_and_stores_nothing(
    spans: InMemorySpanExporter, api: httpx.AsyncClient
) -> None:
    refused = await api.post("/runs", json={"handler": "no.such", "input": {}})
    assert refused.status_code == 422
    (span,) = spans.get_finished_spans()
    assert span.status.status_code.name == "ERROR"


def test_json_log_lines_carry_the_trace_and_span_ids(spans: InMemorySpanExporter) -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "inside", None, None)
    outside = json.loads(JsonFormatter().format(record))
    with tracer().span("work") as span:
        inside = json.loads(JsonFormatter().format(record))
    assert "trace_id" not in outside
    assert span.traceparent is not None
    _, trace_id, span_id, _ = span.traceparent.split("-")
    assert (inside["trace_id"], inside["span_id"]) == (trace_id, span_id)


def test_tracing_asked_for_without_the_extra_is_a_configuration_error(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        sys.modules, "app.telemetry.tracing.otel", None
    )  # what a missing extra looks like
    with pytest.raises(ConfigurationError, match=r"\[otel\] extra"):
        tracing.configure(settings.model_copy(update={"tracing": "otlp"}), "leasehold-test")
    assert not tracer().enabled


def test_with_tracing_off_a_worker_imports_no_tracing_sdk() -> None:
    """No cost when off: the worker, the API and the CLI never load the SDK's tracer."""
    code = (
        "import sys, app.cli.main, app.api.app, app.executor.worker\n"
        "from app.telemetry import tracing\n"
        "from app.settings import Settings\n"
        "tracing.configure(Settings(), 'x')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('app.telemetry.tracing.', "
        "'opentelemetry.sdk.trace', 'opentelemetry.exporter'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
