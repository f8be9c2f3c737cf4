"""``leasehold runs get ID``: the same command, without typer.

``runs get`` runs in shell loops, so its start-up is paid per call (issue 19: <= 300 ms),
and typer spends ~70-100 ms of CPU on this machine at load 7 (``typer.main.get_command``:
~25-30 ms on a quiet core) building click commands for all 38 of the CLI's commands
before it parses the one given, and ``import typer`` with the CLI's module is ~35 ms
more. So the console script (:mod:`app.launch`) calls :func:`app.cli_api.show_run`
(what ``app.cli.runs_get`` runs) itself when :func:`parse_runs_get_args` understands
every word, importing neither typer nor :mod:`app.cli`, and ends the way typer's
standalone mode does (a failure's status, a quiet 130 for a Ctrl-C, status 1 for a
closed pipe). Anything else (``--help``, a flag it does not
know, a word given twice, an id that looks like a flag) goes to typer, which owns the
command's definition and answers word for word as it always has.
"""

from __future__ import annotations

import errno
import sys
from typing import NamedTuple, TextIO, cast

from app.cli_words import EXIT_INTERRUPTED, take_value_flag

_VALUE_OPTIONS = {"--api-url": "api_url", "--api-key": "api_key"}


class RunsGetArgs(NamedTuple):
    """``runs get``'s argument and flags, as typer would pass them to ``runs_get``.

    A NamedTuple, not a dataclass: ``dataclasses`` imports ``inspect`` and ``ast``,
    ~10 ms of a quiet core's CPU that ``runs get`` otherwise never needs.
    """

    run_id: str
    as_json: bool = False
    api_url: str | None = None
    api_key: str | None = None


def parse_runs_get_args(args: list[str]) -> RunsGetArgs | None:
    """The words after ``runs get``, or ``None``: typer must answer them.

    Understood, in any order, each at most once: one run id (not starting with ``-``),
    ``--json``, ``--api-url U`` and ``--api-key K`` (also as ``--flag=value``).
    """
    given: dict[str, str] = {}
    run_ids: list[str] = []
    as_json = False
    words = iter(args)
    for word in words:
        if word == "--json" and not as_json:
            as_json = True
            continue
        if not word.startswith("-"):
            run_ids.append(word)
            continue
        if not take_value_flag(word, words, _VALUE_OPTIONS, given):
            return None
    if len(run_ids) != 1:
        return None
    return RunsGetArgs(run_ids[0], as_json, given.get("api_url"), given.get("api_key"))


def main(args: list[str]) -> bool:
    """Run ``leasehold runs get <args>`` without typer's parser; ``False``: typer must."""
    parsed = parse_runs_get_args(args)
    if parsed is None:
        return False
    from app.cli_api import guarded, show_run

    try:
        guarded(
            lambda: show_run(
                parsed.run_id,
                as_json=parsed.as_json,
                api_url=parsed.api_url,
                api_key=parsed.api_key,
            )
        )
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        _quiet_closed_pipe()
    return True


def _quiet_closed_pipe() -> None:
    """A reader that went away (``| head``): status 1 and no second error, as typer does."""
    from typer._click.utils import PacifyFlushWrapper

    sys.stdout = cast(TextIO, PacifyFlushWrapper(sys.stdout))
    sys.stderr = cast(TextIO, PacifyFlushWrapper(sys.stderr))
    raise SystemExit(1)
