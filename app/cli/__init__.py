"""The ``leasehold`` command and everything only it uses.

:mod:`app.cli.launch` is the console script (``leasehold = "app.cli.launch:main"``): it
quiets the collector (:mod:`app.startup`) before it imports the typer CLI,
:mod:`app.cli.main`, the root with the parts' commands, which adds the groups
(:mod:`app.cli.runs`, :mod:`app.cli.queues`, :mod:`app.cli.schedules`,
:mod:`app.cli.demo`). Beside them: what the commands share to call the API
(:mod:`app.cli.api_calls`, :mod:`app.cli.options`), the checks before a command serves
(:mod:`app.cli.preflight`) and the containers' health probes (:mod:`app.cli.probes`).

Nothing is imported here, so the console script imports only itself and
:mod:`app.startup` before the collector is quieted. Arrows point out of this package:
no other part of ``app`` imports it.
"""
