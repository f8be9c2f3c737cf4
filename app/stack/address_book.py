"""``leasehold up``'s address book: where its API and Redis are, and what it told its children.

``up`` writes ``STATE_DIR/stack.json`` (``.leasehold/stack.json`` by default) before it
starts its children and removes it when it stops. It holds the API's URL, Redis's URL
(with its password: the file is this user's alone, mode 0600, written whole or not at
all) and every setting ``up`` started its children with, as the ``LEASEHOLD_*`` values
they were given. A command started later from the same directory reads it for what
its user did not set (:mod:`app.cli.address` decides when), so a second terminal's
``leasehold submit`` reaches the API on the port ``up`` used, and a replica worker gets
``up``'s Redis, lease TTL, handlers and app dir.

Read with suspicion: a file that is not a regular file this user owns and alone can
read and write, or that is not what ``up`` writes, is refused with the reason
(:class:`UnusableBook`), never half-used: whoever could plant one could point a
command, and the key it sends, at their own server.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from app.errors import LeaseholdError
from app.redaction import redacted

if TYPE_CHECKING:
    from app.settings import Settings

BOOK_VERSION = 1
PRIVATE_FILE_MODE = 0o600
# a book is a few hundred bytes; a bigger file is not one `up` wrote (and is not read whole)
MAX_BOOK_BYTES = 65_536
ENV_PREFIX = "LEASEHOLD_"
REDIS_URL = f"{ENV_PREFIX}REDIS_URL"
API_URL = f"{ENV_PREFIX}API_URL"
# settings that belong to one process and are never handed on: a replica picks its own
# port (API_URL names up's API), the book is found through STATE_DIR, the .env file is
# read by each process itself, and a second metrics listener on up's port would collide
PROCESS_OWN = frozenset(
    {"env_file", "api_host", "api_port", "state_dir", "embedded_redis_port", "worker_metrics_port"}
)
# how long a command waits for the book's Redis to answer before calling the book stale
PING_TIMEOUT_S = 1.0


class UnusableBook(LeaseholdError):
    """The address book exists but cannot be trusted or read; the message says why."""


@dataclass(frozen=True)
class AddressBook:
    """What one ``leasehold up`` wrote: its pid, its directory and its children's settings."""

    path: Path
    pid: int
    directory: Path
    embedded_redis: bool
    settings: dict[str, str]

    @property
    def redis_url(self) -> str:
        """Redis's URL, with its password: never print it (:meth:`describe` redacts it)."""
        return self.settings[REDIS_URL]

    @property
    def api_url(self) -> str:
        """Where ``up``'s API listens, as a client on this host reaches it."""
        return self.settings[API_URL]

    def describe(self) -> str:
        """The line a command prints when it uses this stack: its directory, API, Redis."""
        return (
            f"using the stack started by `leasehold up` in {self.directory}: "
            f"API {redacted(self.api_url)}, Redis {redacted(self.redis_url)}"
        )

    def up_alive(self) -> bool:
        """The ``up`` process that wrote the book still runs (a cheap check: no connection)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a process of another user holds the pid: it exists
        return True

    def redis_answers(self, timeout_s: float = PING_TIMEOUT_S) -> bool:
        """Its Redis answers PING with the book's password within ``timeout_s``."""
        # imported here: a client command reads the book too, and never needs redis
        import redis

        from app.store.redis.connection import sync_client

        try:
            client = sync_client(
                self.redis_url, socket_timeout_s=timeout_s, connect_timeout_s=timeout_s, retries=0
            )
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError, ValueError):
            return False  # refused, a wrong password, another server on the port, a bad URL


def stack_settings(settings: Settings, *, redis_url: str, api_url: str) -> dict[str, str]:
    """The ``LEASEHOLD_*`` values ``up`` hands its children and writes in the book.

    Every setting its user set (flags, environment, ``.env``) but the process's own
    (:data:`PROCESS_OWN`), and always the facts a replica needs: Redis, the API, the
    handlers and the app dir, absolute (a child may start elsewhere).
    """
    chosen = {
        f"{ENV_PREFIX}{name.upper()}": env_value(getattr(settings, name))
        for name in sorted(settings.model_fields_set - PROCESS_OWN)
        if getattr(settings, name) is not None
    }
    return chosen | {
        REDIS_URL: redis_url,
        API_URL: api_url,
        f"{ENV_PREFIX}HANDLERS": env_value(settings.handlers),
        f"{ENV_PREFIX}APP_DIR": str(Path(settings.app_dir).resolve()),
    }


def env_value(value: Any) -> str:
    """A setting's value written as its ``LEASEHOLD_*`` variable takes it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(part) for part in value)
    return str(value)


def write_book(
    path: Path, *, pid: int, directory: Path, embedded_redis: bool, settings: dict[str, str]
) -> AddressBook:
    """Write the book at ``path`` (mode 0600, replacing any other at once); returns it."""
    book = AddressBook(path, pid, directory.resolve(), embedded_redis, dict(settings))
    content = {
        "version": BOOK_VERSION,
        "pid": book.pid,
        "directory": str(book.directory),
        "embedded_redis": embedded_redis,
        "settings": book.settings,
    }
    write_private(path, json.dumps(content, indent=2, sort_keys=True) + "\n")
    return book


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable and writable by this user only (it holds secrets).

    Written to a new file beside it, then renamed over it: a reader sees the old file or
    the new one, never half of one, and never one that was readable by others meanwhile.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def read_book(path: Path) -> AddressBook | None:
    """The book at ``path``; ``None`` when there is none. Raises :class:`UnusableBook`."""
    text = _read_own_file(path)  # bytes: decoding is part of parsing, refused the same way
    if text is None:
        return None
    try:
        content = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UnusableBook(f"{path} is not JSON: not a file `leasehold up` wrote") from None
    return _parse(path, content)


def remove_book(path: Path) -> None:
    """Remove the book (``up`` stops); a book already gone is fine."""
    path.unlink(missing_ok=True)


def _read_own_file(path: Path) -> bytes | None:
    """The file's bytes if it is a regular file of ours, private, and small; None if absent."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnusableBook(f"cannot read {path}: {exc.strerror}") from None
    try:
        _check_private(path, os.fstat(descriptor))
        return os.read(descriptor, MAX_BOOK_BYTES)
    finally:
        os.close(descriptor)


def _check_private(path: Path, info: os.stat_result) -> None:
    """A regular file this user owns, nobody else can read or write, and of a book's size."""
    if not stat.S_ISREG(info.st_mode):
        raise UnusableBook(f"{path} is not a regular file")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise UnusableBook(f"{path} belongs to another user (uid {info.st_uid})")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UnusableBook(
            f"{path} has mode {oct(stat.S_IMODE(info.st_mode))}: others could read or change "
            "it (`leasehold up` writes it 0600)"
        )
    if info.st_size > MAX_BOOK_BYTES:
        raise UnusableBook(f"{path} is {info.st_size} bytes: not a file `leasehold up` wrote")


def _parse(path: Path, content: Any) -> AddressBook:
    """The book's fields checked one by one; anything else is refused, never half-used."""
    if not isinstance(content, dict) or content.get("version") != BOOK_VERSION:
        raise UnusableBook(f"{path} is not a version-{BOOK_VERSION} `leasehold up` address book")
    pid, directory = content.get("pid"), content.get("directory")
    embedded, settings = content.get("embedded_redis"), content.get("settings")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise UnusableBook(f"{path} is damaged: its pid is not a process id")
    if not isinstance(directory, str) or not directory:
        raise UnusableBook(f"{path} is damaged: it names no directory")
    if not isinstance(embedded, bool):
        raise UnusableBook(f"{path} is damaged: embedded_redis is not true or false")
    if not _env_strings(settings) or not {REDIS_URL, API_URL} <= set(settings):
        raise UnusableBook(
            f"{path} is damaged: its settings are not LEASEHOLD_* strings with "
            f"{REDIS_URL} and {API_URL}"
        )
    return AddressBook(path, pid, Path(directory), embedded, dict(settings))


def _env_strings(settings: Any) -> TypeGuard[dict[str, str]]:
    return isinstance(settings, dict) and all(
        isinstance(name, str) and name.startswith(ENV_PREFIX) and isinstance(value, str)
        for name, value in settings.items()
    )


def field_names(variables: Iterable[str]) -> dict[str, str]:
    """``LEASEHOLD_LEASE_TTL_S`` -> ``lease_ttl_s``, for each variable of ``variables``."""
    return {name: name.removeprefix(ENV_PREFIX).lower() for name in variables}
