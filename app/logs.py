"""Logging setup: one line per event, carrying run_id, owner_id and fence when known."""

from __future__ import annotations

import logging
import sys

CONTEXT_FIELDS = ("run_id", "owner_id", "fence")


class ContextFormatter(logging.Formatter):
    """Appends the run context fields a record carries as ``key=value`` pairs."""

    def format(self, record: logging.LogRecord) -> str:
        """Format the record, then add whichever context fields it has."""
        line = super().format(record)
        context = " ".join(
            f"{name}={getattr(record, name)}"
            for name in CONTEXT_FIELDS
            if getattr(record, name, None) is not None
        )
        return f"{line} {context}" if context else line


def configure_logging(level: str) -> None:
    """Send logs to stderr in the text format; called once by each process entry point."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
