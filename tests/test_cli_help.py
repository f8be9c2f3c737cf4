"""``leasehold --help`` without typer (app.cli_help): typer's help, byte for byte.

The console script prints the top-level help from the command table; typer owns the
commands. These tests hold the table to typer's commands and the layout to click's
for every width click can choose, and run both in processes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer.main
from typer._click import Context, HelpFormatter

from app import cli, cli_help
from tests.support.processes import PROBE_TIMEOUT_S, REPO_ROOT

# click's widths run from 50 (a terminal of 52 columns or fewer) to 78 (80 or more)
WIDTHS = range(cli_help.MIN_WIDTH, cli_help.MAX_WIDTH - 1)
PROGS = ["leasehold", "python -m app.launch", "a-much-longer-program-name-x", "l" * 60]


def typer_help(prog: str, width: int) -> str:
    """What typer prints for ``prog --help`` at ``width`` (click's ``echo`` adds the newline)."""
    group = typer.main.get_command(cli.app)
    # resilient parsing: no_args_is_help would refuse an empty argument list
    with Context(group, info_name=prog, resilient_parsing=True) as ctx:
        formatter = HelpFormatter(width=width)
        group.format_help(ctx, formatter)
    return formatter.getvalue().rstrip("\n") + "\n"


@pytest.mark.parametrize("prog", PROGS)
def test_the_help_is_typers_at_every_width_or_left_to_typer(prog: str) -> None:
    rendered = set()
    for width in WIDTHS:
        text = cli_help.render(prog, width)
        if text is not None:
            assert text == typer_help(prog, width), width
            rendered.add(width)
    # the usual names fit every terminal of 58 columns or more; a name too long for a
    # usage line of 78 columns is always typer's to wrap
    if len(prog) <= 20:
        assert set(range(56, 79)) <= rendered
    if len(prog) > 50:
        assert not rendered


def test_the_table_is_typers_commands_in_typers_order() -> None:
    group = typer.main.get_command(cli.app)
    with Context(group, info_name="leasehold") as ctx:
        names = group.list_commands(ctx)  # type: ignore[attr-defined]
        helps = [group.get_command(ctx, name).help for name in names]  # type: ignore[attr-defined]
    first_paragraphs = [" ".join(text.split("\n\n")[0].split()) for text in helps]
    assert list(cli_help.COMMANDS) == list(zip(names, first_paragraphs, strict=True))
    assert group.help == cli_help.APP_HELP


@pytest.mark.parametrize(
    ("columns", "width"),
    [("200", 78), ("80", 78), ("79", 77), ("60", 58), ("52", 50), ("10", 50), ("x", 78)],
)
def test_the_width_is_clicks(columns: str, width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert cli_help.help_width() == width == HelpFormatter().width


def test_without_columns_the_width_is_the_terminals_or_80(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli_help.help_width() == HelpFormatter().width


@pytest.mark.parametrize("columns", ["80", "66"])
def test_the_console_script_prints_typers_help_and_imports_no_typer(columns: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": columns}
    answers = []
    for module in ("app.launch", "app.cli"):
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
        # the usage line names how it was started: `python -m app.launch` / `app.cli`
        answers.append((done.returncode, done.stdout.replace(module, "M"), done.stderr))
    assert answers[0] == answers[1]
    assert answers[0][0] == 0 and "Commands:\n  up " in answers[0][1]


def test_help_imports_nothing_but_the_table() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['leasehold', '--help']\n"
        "from app.launch import main\n"
        "main()\n"
        "names = ('typer', 'click', 'app.cli', 'pydantic', 'json', 'textwrap', 'shutil')\n"
        "print([n for n in names if n in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "80"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert done.stdout.startswith("Usage: leasehold [OPTIONS] COMMAND [ARGS]...\n")
    assert done.stderr == "[]\n"
