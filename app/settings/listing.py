"""Listing runs: what one ``GET /runs`` page may return, and what it may read to find it.

A page is bounded twice: by what it returns (``list_max_bytes``) and by what it reads
from Redis to find it (the scan budget). A filter that matches little (a status, a
handler, ``metadata.<key>=<value>``) reads many runs per run it returns; without the
scan budget one request over 2,000 runs with 50 KB of metadata each had Redis send
~100 MB. Past either budget a page ends early with a ``next_cursor``; past the scan
budget it also says ``"truncated": "scan_budget"``.
"""

from __future__ import annotations

from pydantic import Field

from app.settings.group import SettingsGroup


class ListingSettings(SettingsGroup):
    """The bounds of one listing call: bytes returned, and bytes and runs read."""

    list_max_bytes: int = Field(
        default=4_194_304,
        ge=1024,
        le=268_435_456,
        description="Byte budget of one GET /runs page: it stops early (with next_cursor) "
        "once its items reach this size, so a list never costs more memory than this",
    )
    list_scan_budget_bytes: int = Field(
        default=4_194_304,
        ge=1024,
        le=268_435_456,
        description="Bytes of run records (summaries, metadata a filter reads, the fields "
        "`include` asks for) one listing call may read from Redis; past it the page ends "
        'with next_cursor and "truncated": "scan_budget"',
    )
    list_scan_budget_runs: int = Field(
        default=5000,
        ge=1,
        le=1_000_000,
        description="Runs one listing call may look at (filtered out or not); past it the "
        'page ends with next_cursor and "truncated": "scan_budget"',
    )
