"""Tracing fixtures: an in-process tracer over the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.telemetry import tracing
from app.telemetry.tracing.otel import OtelTracer


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span this process ends during the test, exported synchronously."""
    exporter = InMemorySpanExporter()
    tracing.install(OtelTracer.with_processor(SimpleSpanProcessor(exporter), "leasehold-test"))
    yield exporter
    tracing.reset()
