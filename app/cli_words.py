"""The words of a command line read without typer, for the commands that skip it.

``leasehold worker`` and ``leasehold runs get`` parse their few flags themselves (their
start-up is paid per call, issue 19) and hand anything they are not sure of to typer;
what both need to do that alike lives here, importing nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

# what typer exits with on a Ctrl-C (128 + SIGINT), without a word
EXIT_INTERRUPTED = 130


def take_value_flag(
    word: str, words: Iterator[str], options: Mapping[str, str], given: dict[str, str]
) -> bool:
    """Record ``--flag value`` or ``--flag=value`` in ``given``; ``False``: typer must judge.

    ``options`` maps each flag to its name in ``given``. Refused (for typer to answer):
    an unknown flag, one given twice, a missing or empty value, a value that starts
    with ``-`` (click would read it as the next option). ``words`` is advanced past a
    separate value.
    """
    flag, equals, value = word.partition("=")
    name = options.get(flag)
    if name is None or name in given:
        return False
    if not equals:
        value = next(words, "")
    if not value or value.startswith("-"):
        return False
    given[name] = value
    return True
