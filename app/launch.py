"""The ``leasehold`` console script: the CLI, started behind a quiet collector.

Nothing but this module and :mod:`app.startup` is imported before the collector is
quieted; why that pays is in :mod:`app.startup`. ``leasehold worker ...`` goes to
:mod:`app.worker_command` without typer when every flag is one it knows (a worker's
start-up is time before its first claim); ``leasehold runs get ...`` to
:mod:`app.runs_get_command`, which calls the command without typer's command tree;
``leasehold --help`` to :mod:`app.cli_help`, which prints the top-level help from the
command table without typer; anything else is the typer CLI's.
"""

from __future__ import annotations

import sys

from app.startup import quiet_collector


def main() -> None:
    """Console-script entry point: the worker's light path, else ``app.cli.main``."""
    quiet_collector()
    args = sys.argv[1:]
    if args[:1] == ["worker"]:
        from app.worker_command import main as worker_main

        if worker_main(args[1:]):
            return
    if args[:1] == ["--help"]:
        from app.cli_help import main as help_main

        if help_main(args):
            return
    if args[:2] == ["runs", "get"]:
        from app.runs_get_command import main as runs_get_main

        if runs_get_main(args[2:]):
            return
    from app.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # python -m app.launch: the console script without installing it
    main()
