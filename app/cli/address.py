"""Which stack a command uses: what its user set, else the ``leasehold up`` running here.

``leasehold up`` writes its address book (:mod:`app.stack.address_book`) in its state
directory. A command started from that directory reads it for every setting its user
did not set (flag, environment or ``.env``), and says so in one line:

* a process that needs Redis (``worker``, ``api``, ``reconciler``, ``probe redis|worker``)
  joins the book's stack when ``LEASEHOLD_REDIS_URL`` is unset and the book's Redis
  answers, or when the URL set is the book's. Unset and no live book: it refuses to
  start (exit 2) with one line saying what to set. There is no implicit
  ``127.0.0.1:6379``: a process that quietly used it served whoever owned it.
* a client command (``submit``, ``runs ...``, ``queues ...``, ``probe api``, ``gate``)
  joins it when neither ``--api-url`` nor ``LEASEHOLD_API_URL`` is set and the ``up``
  that wrote it still runs (a pid check: no connection, a client starts fast). A book it
  cannot use is named on stderr and the command goes on with its own settings.

The values joined are put in this process's environment, so what the process starts
or loads later (a handler calling ``load_settings()``, a child) sees the same stack.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.cli.preflight import refuse, settings_or_exit
from app.errors import ConfigurationError
from app.redaction import redacted
from app.stack.address_book import PROCESS_OWN, AddressBook, UnusableBook, field_names, read_book

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger("app.cli")
WHAT_TO_SET = "set LEASEHOLD_REDIS_URL, or start `leasehold up` and run this from its directory"


@dataclass(frozen=True)
class Joined:
    """The stack a process joined, and the variables it took from the book (names only)."""

    book: AddressBook
    adopted: tuple[str, ...]


def process_settings_or_exit(**overrides: Any) -> tuple[Settings, Joined | None]:
    """Settings of a process that connects to Redis, and the stack it joined (or None).

    Refuses (exit 2, one line) when no Redis is set and no live ``up`` runs from here.
    """
    settings = settings_or_exit(**overrides)
    path = settings.stack_file.absolute()
    try:
        book, problem = read_book(path), ""
    except UnusableBook as exc:
        book, problem = None, str(exc)
    if settings.redis_url:
        if book is not None and book.redis_url == settings.redis_url:
            return _joined(settings, book, overrides)
        return settings, None  # the user chose a Redis: the book is not about it
    if book is None:
        refuse(f"no Redis to use: {WHAT_TO_SET} ({problem or f'no {path}'})")
    if not book.redis_answers():
        refuse(
            f"no Redis to use: {path} is stale: its Redis at {redacted(book.redis_url)} does "
            f"not answer (has `leasehold up` stopped?); {WHAT_TO_SET}"
        )
    return _joined(settings, book, overrides)


def client_settings_or_exit(api_url: str | None = None) -> Settings:
    """Settings of a command that talks to the API (``api_url``: its ``--api-url`` flag)."""
    settings = settings_or_exit()
    if api_url or settings.api_url:
        return settings  # the user said where the API is
    path = settings.stack_file.absolute()
    try:
        book = read_book(path)
    except UnusableBook as exc:
        _say(f"leasehold: ignoring {exc}")
        return settings
    if book is None:
        return settings
    if not book.up_alive():
        _say(
            f"leasehold: ignoring {path}: the `leasehold up` that wrote it (pid {book.pid}) "
            "no longer runs"
        )
        return settings
    joined, _ = _joined(settings, book, {})
    _say(book.describe())
    return joined


def log_addresses(settings: Settings, joined: Joined | None, *, api: str | None) -> None:
    """The process's one line naming its Redis and the API it uses, passwords masked; and,
    when it joined ``up``'s stack, which settings it took from there (names, never values).

    ``api``: the API it reaches or serves (None: it uses none, the reconciler).
    """
    if joined is not None:
        log.info("%s", joined.book.describe())
        if joined.adopted:
            log.info("settings from its address book: %s", ", ".join(joined.adopted))
        return
    redis_url = redacted(settings.resolved_redis_url())
    if api is None:
        log.info("Redis %s (LEASEHOLD_REDIS_URL)", redis_url)
    else:
        log.info("Redis %s (LEASEHOLD_REDIS_URL), API %s", redis_url, redacted(api))


def _joined(
    settings: Settings, book: AddressBook, overrides: dict[str, Any]
) -> tuple[Settings, Joined]:
    """``settings`` with the book's values for what its user did not set."""
    from app.settings import Settings, load_settings

    own = settings.model_fields_set | PROCESS_OWN
    adopted = []
    for variable, name in sorted(field_names(book.settings).items()):
        if name in Settings.model_fields and name not in own:
            os.environ[variable] = book.settings[variable]
            adopted.append(variable)
    try:
        # read again: the environment holds the book's values now
        return load_settings(**overrides), Joined(book, tuple(adopted))
    except ConfigurationError as exc:
        refuse(f"{book.path} (written by `leasehold up`) holds an {exc}")


def _say(line: str) -> None:
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
