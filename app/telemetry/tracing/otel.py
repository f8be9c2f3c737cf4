"""The OpenTelemetry SDK behind :class:`app.telemetry.tracing.Tracer` (the ``[otel]`` extra).

Imported only by :func:`app.telemetry.tracing.configure` when tracing is on. The SDK
reads the standard variables itself: ``OTEL_EXPORTER_OTLP_*`` (endpoint,
headers, timeout), ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*`` (batching) and ``OTEL_SDK_DISABLED``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.telemetry.tracing import Attributes, Span, Tracer, parse_traceparent

_PROPAGATOR = TraceContextTextMapPropagator()
# ids a span must get instead of random ones (an attempt's derived ids): set only
# around one start_span call, which asks the generator synchronously
_FORCED_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "leasehold_forced_ids", default=None
)


class _Ids(RandomIdGenerator):
    """Random ids, except where :data:`_FORCED_IDS` names the ones to use."""

    def generate_span_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[1] if forced else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[0] if forced else super().generate_trace_id()


def _extract(traceparent: str) -> otel_context.Context:
    return _PROPAGATOR.extract({"traceparent": traceparent})


def _span_context(traceparent: str) -> trace.SpanContext | None:
    valid = parse_traceparent(traceparent)
    if valid is None:
        return None
    _, trace_id, span_id, flags = valid.split("-")
    return trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )


class OtelSpan(Span):
    """An SDK span behind the facade."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        """Add an SDK span event."""
        self.span.add_event(name, attributes=dict(attributes or {}))

    def set_attributes(self, attributes: Attributes) -> None:
        """Set SDK span attributes."""
        self.span.set_attributes(dict(attributes))

    def fail(self, error: BaseException) -> None:
        """Record the exception and an ERROR status."""
        self.span.record_exception(error)
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}"))

    def end(self) -> None:
        """End the SDK span."""
        self.span.end()

    @property
    def traceparent(self) -> str | None:
        """The span's context in W3C form (None when the SDK is disabled)."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self.span))
        return carrier.get("traceparent")


class OtelTracer(Tracer):
    """The SDK's tracer, one provider per process."""

    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("leasehold")

    @classmethod
    def for_exporter(cls, exporter: str, service_name: str) -> OtelTracer:
        """A provider exporting in batches over OTLP/HTTP (``otlp``) or to stderr."""
        span_exporter: SpanExporter = (
            OTLPSpanExporter() if exporter == "otlp" else ConsoleSpanExporter()
        )
        return cls.with_processor(BatchSpanProcessor(span_exporter), service_name)

    @classmethod
    def with_processor(cls, processor: SpanProcessor, service_name: str) -> OtelTracer:
        """A provider with this span processor (tests pass one over an in-memory exporter).

        The service name is ``service_name`` unless ``OTEL_SERVICE_NAME`` (or
        ``OTEL_RESOURCE_ATTRIBUTES``) names another; the provider becomes the global
        one, so spans a handler starts with the plain OpenTelemetry API nest in ours.
        """
        from_env = OTELResourceDetector().detect().attributes
        resource = Resource.create({SERVICE_NAME: service_name, **from_env})
        provider = TracerProvider(resource=resource, id_generator=_Ids())
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        return cls(provider)

    def start_span(
        self,
        name: str,
        *,
        attributes: Attributes | None = None,
        parent: str | None = None,
        root: bool = False,
        links: Sequence[str] = (),
        start_ns: int | None = None,
        span_context: str | None = None,
    ) -> Span:
        """Start an SDK span (see :meth:`app.telemetry.tracing.Tracer.start_span`)."""
        context: otel_context.Context | None = None
        if parent is not None and parse_traceparent(parent) is not None:
            context = _extract(parent)
        elif root:
            context = otel_context.Context()
        span_links = [trace.Link(ctx) for ctx in map(_span_context, links) if ctx is not None]
        forced = _span_context(span_context) if span_context else None
        token = _FORCED_IDS.set((forced.trace_id, forced.span_id) if forced else None)
        try:
            span = self._tracer.start_span(
                name,
                context=context,
                attributes=dict(attributes or {}),
                links=span_links,
                start_time=start_ns,
            )
        finally:
            _FORCED_IDS.reset(token)
        return OtelSpan(span)

    @contextlib.contextmanager
    def use(self, span: Span) -> Iterator[Span]:
        """Make the span current (a no-op span leaves the context as it is)."""
        if not isinstance(span, OtelSpan):
            yield span
            return
        with trace.use_span(span.span, end_on_exit=False, record_exception=False):
            yield span

    def current_ids(self) -> dict[str, str]:
        """The current span's ids in hex, for log lines and exemplars."""
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return {}
        return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}

    def shutdown(self) -> None:
        """Flush and stop the provider's processors."""
        self.provider.shutdown()
