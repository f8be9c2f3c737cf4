"""The options the commands that talk to the API share: ``--json``, paging, address, key."""

from __future__ import annotations

from typing import Annotated

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
PageSize = Annotated[int, typer.Option("--limit", help="Page size.", min=1, max=500)]
PageCursor = Annotated[str | None, typer.Option("--cursor", help="Cursor from a previous page.")]
ApiUrl = Annotated[str | None, typer.Option("--api-url", help="API base URL.")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="Bearer key for an API with LEASEHOLD_API_KEYS set (default: LEASEHOLD_API_KEY).",
    ),
]
