"""``leasehold --help`` without typer: the command table, and click's layout of it.

``--help`` is what a person types first, and typer with its vendored click and the
CLI's module of 38 commands is ~0.1-0.2 s of CPU on this machine before a word is
printed (issue 19: <= 300 ms). So the console script (:mod:`app.launch`) prints the
top-level help itself, from the table here, laid out as click lays out a group's help
for the terminal's width (each command's help cut to its first sentence or to what
fits), and leaves to typer only a terminal so narrow that click would wrap a line.
The typer CLI (:mod:`app.cli`) takes the group's help and each sub-group's from this
table, so there is one text; the top commands' short helps are their docstrings' first
paragraphs, and ``tests/test_cli_help.py`` holds this output to typer's, byte for
byte, for every width click can choose and both program names.
"""

from __future__ import annotations

import os
import sys

APP_HELP = "Leasehold: durable runs on Redis with fenced leases."
# the sub-groups' help, as app.cli gives it to each typer.Typer
GROUP_HELP = {
    "runs": "Inspect, cancel, resolve, retry, delete and purge runs.",
    "probe": "Health probes for containers: exit 0 when healthy, 1 when not.",
    "queues": "List and declare queues.",
    "schedules": "Cron and interval schedules: list, create, pause, trigger, backfill.",
    "demo": "Scripted demonstrations on a private stack.",
}
# every top-level command in the order typer lists them (definition order), with the
# first paragraph of its help: the commands' docstrings in app.cli, then the groups
COMMANDS: tuple[tuple[str, str], ...] = (
    (
        "up",
        "Start everything: Redis (embedded unless LEASEHOLD_REDIS_URL is set), the API, workers.",
    ),
    ("api", "Serve the HTTP API (uvicorn)."),
    ("worker", "Run an executor: claim runs, hold their leases, drain on SIGTERM."),
    ("reconciler", "Run a standalone reconciler (one also runs inside every worker by default)."),
    (
        "submit",
        "Create a run and print it (--wait: once it has ended; --follow: stream its events).",
    ),
    *GROUP_HELP.items(),
)
OPTIONS = (("--help", "Show this message and exit."),)
# click's help layout: at most 80 columns, 2 less than the terminal, never under 50
MAX_WIDTH = 80
MIN_WIDTH = 50
COLUMN_SPACING = 2
FALLBACK_COLUMNS = 80


def main(args: list[str]) -> bool:
    """Print the top-level help for ``leasehold --help``; ``False``: typer must answer."""
    if args != ["--help"]:
        return False
    text = render(program_name(), help_width())
    if text is None:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def render(prog: str, width: int) -> str | None:
    """The group's help as click writes it for ``prog`` at ``width`` columns.

    ``None`` when a line would have to wrap (a terminal narrower than the text, a long
    program name): typer then writes it, with click's wrapping rules, which live there.
    """
    usage_prefix = f"Usage: {prog} "
    if width < len(usage_prefix) + 20:  # click puts the arguments on a line of their own
        return None
    limit = width - 6 - max(len(name) for name, _ in COMMANDS)
    options = _rows(OPTIONS, width)
    commands = _rows(tuple((name, short_help(text, limit)) for name, text in COMMANDS), width)
    usage = f"{usage_prefix}[OPTIONS] COMMAND [ARGS]..."
    if options is None or commands is None or max(len(usage), len(APP_HELP) + 2) > width:
        return None
    lines = [usage, "", f"  {APP_HELP}", "", "Options:", *options, "", "Commands:", *commands]
    return "\n".join(lines) + "\n"


def _rows(rows: tuple[tuple[str, str], ...], width: int) -> list[str] | None:
    """click's ``write_dl`` at an indent of 2: names padded to one column, text beside.

    ``None`` if a name or a text is longer than its column: click would wrap it.
    """
    first_col = min(max(len(name) for name, _ in rows), 30) + COLUMN_SPACING
    text_width = max(width - first_col - 2, 10)
    lines = []
    for name, text in rows:
        if len(name) > first_col - COLUMN_SPACING or len(text) > text_width:
            return None
        lines.append(f"  {name}{' ' * (first_col - len(name))}{text}")
    return lines


def short_help(text: str, limit: int) -> str:
    """click's ``make_default_short_help``: the first sentence, or words + ``...`` to fit."""
    words = text.split()
    total = 0
    for index, word in enumerate(words):
        total += len(word) + (index > 0)
        if total > limit:
            break
        if word.endswith("."):
            return " ".join(words[: index + 1])
        if total == limit and index != len(words) - 1:
            break
    else:
        return " ".join(words)
    total += len("...")
    while index > 0:
        total -= len(words[index]) + (index > 0)
        if total <= limit:
            break
        index -= 1
    return " ".join(words[:index]) + "..."


def help_width() -> int:
    """The width click formats help to: the terminal's columns, at most 80, less 2, >= 50.

    The columns are found as ``shutil.get_terminal_size`` finds them (``COLUMNS``, else
    standard output's terminal, else 80), without importing shutil (and its archive
    modules), which costs more than printing the help.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or FALLBACK_COLUMNS
    return max(min(columns, MAX_WIDTH) - 2, MIN_WIDTH)


def program_name() -> str:
    """The program's name as click's usage line gives it (``leasehold``, ``python -m X``)."""
    path = sys.argv[0]
    package = getattr(sys.modules["__main__"], "__package__", None)
    if not package:  # a file or a console script ran
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = package if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"
