"""A tiny OTLP/HTTP trace receiver: what real exporters in child processes send, parsed.

It speaks the wire protocol the SDK's ``OTLPSpanExporter`` uses (protobuf
``ExportTraceServiceRequest`` POSTed to ``/v1/traces``), so API and worker
subprocesses export exactly as they would to a collector.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids in hex, attributes decoded."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]

    def event(self, name: str) -> dict[str, Any]:
        """The attributes of the first event called ``name``."""
        return next(attributes for event, attributes in self.events if event == name)


@dataclass
class Receiver:
    """The spans received so far (thread-safe) and the endpoint to send them to."""

    endpoint: str
    _spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[ReceivedSpan]:
        """A copy of everything received."""
        with self._lock:
            return list(self._spans)

    def add(self, request: ExportTraceServiceRequest) -> None:
        """Flatten one export request into spans."""
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=[
                                (e.name, {a.key: _value(a.value) for a in e.attributes})
                                for e in span.events
                            ],
                            links=[
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ],
                        )
                    )
        with self._lock:
            self._spans.extend(received)


def _handler_for(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class OtlpHandler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            receiver.add(request)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a line per export is noise in the test's output."""

    return OtlpHandler


@pytest.fixture
def otlp() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on a free loopback port, for this test only."""
    receiver = Receiver(endpoint="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(receiver))
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp", daemon=True)
    thread.start()
    yield receiver
    server.shutdown()
    server.server_close()
