"""Tracing: OpenTelemetry spans when ``LEASEHOLD_TRACING`` is on, a no-op facade otherwise.

The product calls :func:`tracer` and gets a :class:`Tracer`. Off (the default),
that is this module's no-op tracer and nothing of opentelemetry is imported,
so a worker that does not trace starts and claims as fast as before. On, the
process entry point calls :func:`configure` once, which imports
:mod:`app.telemetry.tracing.otel` (the ``[otel]`` extra) and installs the SDK's tracer;
exporter endpoint, headers, sampler and batching come from the standard
``OTEL_*`` variables, read by the SDK itself.

Spans cross processes as W3C ``traceparent`` strings, the only form that is
stored: ``POST /runs`` keeps one on the run record, the worker parents each
attempt on it. An attempt's span id is derived from (run id, fence) by
:func:`attempt_traceparent`, so the worker that takes a run over can link its
attempt to the lost one knowing only the lost fence, even though the lost
attempt's process died before it could write anything down.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from app.errors import ConfigurationError

if TYPE_CHECKING:
    from app.settings import Settings

AttributeValue = str | int | float | bool
Attributes = Mapping[str, AttributeValue]

# W3C Trace Context: version 00 is exactly 55 characters; a later version may append
# fields after a dash, so longer values are accepted up to this bound and cut to 55
TRACEPARENT_MAX_CHARS = 256
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def parse_traceparent(value: str | None) -> str | None:
    """The canonical ``traceparent`` in ``value``, or None when it is not a valid one.

    Invalid values are ignored rather than refused: W3C Trace Context requires a
    receiver to drop a malformed header and start a new trace, and a tracing
    header set by some proxy must never cost the caller its run.
    """
    if value is None or len(value) > TRACEPARENT_MAX_CHARS:
        return None
    value = value.strip().lower()
    version = value[:2]
    if version != "00" and len(value) > 55 and value[55] == "-":
        value = value[:55]  # a future version: its first four fields read as version 00
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, _flags = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    if version == "00" and len(value) != 55:
        return None
    return value


def _digest(text: str, nbytes: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:nbytes], "big")
    return value or 1  # all-zero ids are invalid in W3C and OpenTelemetry


def attempt_traceparent(run_id: str, fence: int, run_traceparent: str | None) -> str:
    """The span context of the attempt holding ``fence``, computable by any process.

    Its trace is the run's (from the stored ``traceparent``; a run created
    without one gets a trace id derived from its id, so all its attempts still
    share one trace) and its span id is derived from (run id, fence).
    """
    parent = parse_traceparent(run_traceparent)
    trace_id = parent[3:35] if parent else f"{_digest(run_id, 16):032x}"
    flags = parent[53:55] if parent else "01"
    return f"00-{trace_id}-{_digest(f'{run_id}:{fence}', 8):016x}-{flags}"


class Span:
    """One unit of traced work; this base class records nothing (tracing off)."""

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        """Mark a moment inside the span (a verdict, a lease loss, a release)."""

    def set_attributes(self, attributes: Attributes) -> None:
        """Add facts learnt after the span started (how it ended)."""

    def fail(self, error: BaseException) -> None:
        """Record ``error`` on the span and mark its status as an error."""

    def end(self) -> None:
        """Close the span; its duration ends now."""

    @property
    def traceparent(self) -> str | None:
        """This span's context as a W3C ``traceparent`` (None when not traced)."""
        return None


NO_SPAN = Span()


class Tracer:
    """Starts spans; this base class is the no-op tracer used while tracing is off."""

    enabled = False

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
        """Start a span, child of ``parent`` (a traceparent) or else of the current span.

        ``root`` starts a new trace when there is no parent; ``links`` are
        traceparents of related spans (a takeover links to the lost attempt);
        ``span_context`` forces this span's own trace and span id (from
        :func:`attempt_traceparent`), ``start_ns`` its start (epoch ns).
        """
        return NO_SPAN

    @contextlib.contextmanager
    def use(self, span: Span) -> Iterator[Span]:
        """Make ``span`` the current one for the block (logs and child spans see it)."""
        yield span

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        parent: str | None = None,
        root: bool = False,
    ) -> Iterator[Span]:
        """A current span for the block, ended (and failed on error) after it.

        A child of ``parent`` (a traceparent), else of the current span, else a
        new trace; ``root`` ignores the current span.
        """
        span = self.start_span(name, attributes=attributes, parent=parent, root=root)
        with self.use(span):
            try:
                yield span
            except BaseException as exc:
                span.fail(exc)
                raise
            finally:
                span.end()

    def current_ids(self) -> dict[str, str]:
        """``trace_id`` and ``span_id`` (hex) of the current span, or {} outside of one."""
        return {}

    def shutdown(self) -> None:
        """Export what is still buffered; called once as the process stops."""


_NO_TRACER = Tracer()
_tracer: Tracer = _NO_TRACER


def tracer() -> Tracer:
    """The process's tracer: the no-op one until :func:`configure` turned tracing on."""
    return _tracer


def configure(settings: Settings, service_name: str) -> Tracer:
    """Install this process's tracer from ``LEASEHOLD_TRACING``; call once at start-up.

    Raises :class:`~app.errors.ConfigurationError` when tracing is asked for but
    the ``[otel]`` extra is not installed (a silent no-op would hide it).
    """
    global _tracer
    if settings.tracing == "off":
        _tracer = _NO_TRACER
        return _tracer
    try:
        from app.telemetry.tracing.otel import OtelTracer
    except ImportError as exc:
        raise ConfigurationError(
            f"LEASEHOLD_TRACING={settings.tracing} needs the [otel] extra "
            f"(pip install 'leasehold[otel]'): {exc}"
        ) from None
    install(OtelTracer.for_exporter(settings.tracing, service_name))
    return _tracer


def install(chosen: Tracer) -> None:
    """Make ``chosen`` the process's tracer (tests install one over an in-memory exporter)."""
    global _tracer
    _tracer = chosen


def reset() -> None:
    """Shut the current tracer down and go back to the no-op one."""
    global _tracer
    _tracer.shutdown()
    _tracer = _NO_TRACER
