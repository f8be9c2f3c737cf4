"""A worker's own Prometheus port (``LEASEHOLD_WORKER_METRICS_PORT``).

It listens on ``LEASEHOLD_WORKER_METRICS_HOST`` (loopback by default) and, when
``LEASEHOLD_API_KEYS`` is set, answers only scrapes that send one of those keys
as a bearer token, compared exactly as the API compares them (:mod:`app.keys`).
Settings refuse a port beyond loopback without keys, so no worker serves its
queues, handlers and load to whoever can reach it.

A WSGI server in daemon threads, like prometheus-client's own, so a scrape never
waits for the worker's event loop. What a careless or hostile client can hold is
bounded: ``LEASEHOLD_WORKER_METRICS_MAX_CONNECTIONS`` requests at once (one more
gets 503 with ``Retry-After``), and a connection that sends nothing is dropped
after :data:`READ_TIMEOUT_S`.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app

from app.keys import bearer_credentials, key_digest, key_matches
from app.settings import Settings
from app.telemetry.metrics import WORKER_REGISTRY

# a scraper sends its request at once; a connection silent this long is dropped
READ_TIMEOUT_S = 5.0
RETRY_AFTER_S = 1
PROBLEM_BASE = "https://leasehold.dev/problems/"
REALM = 'Bearer realm="leasehold"'

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def problem_body(status: int, title: str, detail: str, kind: str) -> bytes:
    """The API's problem+json shape (type, title, status, detail), for a plain listener."""
    body = {"type": PROBLEM_BASE + kind, "title": title, "status": status, "detail": detail}
    return json.dumps(body).encode()


class KeyedMetrics:
    """WSGI app: the metrics exposition, behind the bearer keys when there are any."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.key_digests = [key_digest(key.encode()) for key in keys]
        self.metrics: WsgiApp = make_wsgi_app(WORKER_REGISTRY)  # the worker's own, not the API's

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Serve the metrics, or 401 problem+json without them."""
        if self.key_digests:
            header = str(environ.get("HTTP_AUTHORIZATION", "")).encode("latin-1")
            token = bearer_credentials(header)
            if token is None or not key_matches(token, self.key_digests):
                detail = "this metrics port requires an 'Authorization: Bearer <key>' header"
                body = problem_body(401, "Unauthorized", detail, "unauthorized")
                start_response(
                    "401 Unauthorized",
                    [
                        ("Content-Type", "application/problem+json"),
                        ("Content-Length", str(len(body))),
                        ("WWW-Authenticate", REALM),
                    ],
                )
                return [body]
        return self.metrics(environ, start_response)


class _QuietHandler(WSGIRequestHandler):
    # socketserver sets this as the connection's timeout: a silent client cannot
    # hold a thread and a connection slot for longer
    timeout = READ_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A threading WSGI server that serves at most ``max_connections`` requests at once."""

    daemon_threads = True

    def __init__(self, host: str, port: int, app: WsgiApp, *, max_connections: int) -> None:
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((host, port), _QuietHandler)
        self.set_app(app)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve in a thread if a slot is free; otherwise answer 503 at once."""
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """The handler thread: gives its slot back however the request ended."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        body = problem_body(
            503, "Service Unavailable", "too many connections to this metrics port", "busy"
        )
        head = (
            "HTTP/1.0 503 Service Unavailable\r\n"
            "Content-Type: application/problem+json\r\n"
            f"Retry-After: {RETRY_AFTER_S}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        try:
            request.settimeout(1.0)
            request.sendall(head.encode() + body)
            request.shutdown(socket.SHUT_WR)
            # read what the client sent, so closing does not reset the answer away;
            # briefly: this runs in the accepting thread
            request.settimeout(0.1)
            request.recv(65536)
        except OSError:
            pass
        finally:
            request.close()


def start_metrics_server(settings: Settings) -> MetricsServer:
    """Listen on the worker metrics host and port, serving from a daemon thread.

    The caller stops it with ``shutdown()`` then ``server_close()``.
    """
    server = MetricsServer(
        settings.worker_metrics_host,
        settings.worker_metrics_port,
        KeyedMetrics(settings.api_keys),
        max_connections=settings.worker_metrics_max_connections,
    )
    thread = threading.Thread(target=server.serve_forever, name="leasehold-metrics", daemon=True)
    thread.start()
    return server
