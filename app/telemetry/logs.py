"""Logging setup: one line per event, carrying run_id, owner_id and fence when known.

Two formats, chosen by ``LEASEHOLD_LOG_FORMAT``:

* ``text`` (default) for people: ``<time> <level> <logger>: <message> run_id=… fence=…``;
* ``json`` for log pipelines: one JSON object per line with ``ts``, ``level``,
  ``logger``, ``message`` and whichever of ``run_id``, ``owner_id``, ``fence`` the
  record carries (``logger.info(..., extra={"run_id": ...})``); with tracing on,
  also ``trace_id`` and ``span_id`` of the span the line was logged in, so a
  line leads to its trace and a trace to its lines.

Only those named context fields are ever copied from a record, never arbitrary
``extra`` values, so run inputs, outputs and request headers stay out of the
logs unless a message puts them there. uvicorn's loggers (server and access log)
propagate to the same root handler, so an API process writes one format only.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from app.telemetry.tracing import tracer

CONTEXT_FIELDS = ("run_id", "owner_id", "fence")
ACCESS_LOGGER = "uvicorn.access"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", ACCESS_LOGGER, "uvicorn.asgi")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LogFormat = Literal["text", "json"]


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {
        name: getattr(record, name)
        for name in CONTEXT_FIELDS
        if getattr(record, name, None) is not None
    }


class ContextFormatter(logging.Formatter):
    """Appends the run context fields a record carries as ``key=value`` pairs."""

    def format(self, record: logging.LogRecord) -> str:
        """Format the record, then add whichever context fields it has."""
        line = super().format(record)
        context = " ".join(f"{name}={value}" for name, value in _context(record).items())
        return f"{line} {context}" if context else line


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a traceback is folded into the ``exc`` string.

    uvicorn's access records also get ``client``, ``method``, ``path`` and
    ``status`` as fields, so a pipeline can filter on them without parsing text.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as a single line of JSON."""
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
            **tracer().current_ids(),
        }
        if record.name == ACCESS_LOGGER:
            entry.update(_access_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """uvicorn logs access as ``(client, method, path, http_version, status)`` args."""
    args = record.args
    if not isinstance(args, tuple) or len(args) != 5:
        return {}
    client, method, path, _version, status = args
    return {"client": client, "method": method, "path": path, "status": status}


def make_formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter for ``LEASEHOLD_LOG_FORMAT``."""
    if log_format == "json":
        return JsonFormatter()
    return ContextFormatter(TEXT_FORMAT)


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Send every log to stderr in one format; called once by each process entry point.

    uvicorn's own loggers lose their handlers and propagate to the root, so the
    API's server and access lines come out in the same format as everything else
    (the CLI starts uvicorn with ``log_config=None`` so it does not re-install them).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in UVICORN_LOGGERS:
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
