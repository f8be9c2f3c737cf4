"""The ``leasehold`` console script: the typer CLI, started behind a quiet collector.

Nothing but this module and :mod:`app.startup` is imported before the collector is
quieted; why that pays is in :mod:`app.startup`. Every command is then the typer CLI's
(:mod:`app.cli.main`), which imports what only some commands need inside those commands.
"""

from __future__ import annotations

from app.startup import quiet_collector


def main() -> None:
    """Console-script entry point: quiet the collector, then run ``app.cli.main.main``."""
    quiet_collector()
    from app.cli.main import main as cli_main

    cli_main()


if __name__ == "__main__":  # python -m app.cli.launch: the console script without installing it
    main()
