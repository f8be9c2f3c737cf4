"""``python -m app.cli``: the typer CLI without the console script's quiet collector."""

from __future__ import annotations

from app.cli.main import main

main()
