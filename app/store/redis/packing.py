"""Commands packed into RESP by hiredis's C packer on asyncio connections too.

redis-py's blocking connections pack commands with hiredis when it is installed
(``HiredisRespSerializer``), but its asyncio connections always use the pure
Python packer, which encodes every argument and joins bytes one argument at a
time. Measured on this project's hot path (a pipeline of 1,000 ``create_run``
EVALSHAs of 23 arguments each): 14.6 µs per command in Python, 5.3 µs with
hiredis; under ``cProfile`` the Python packer was close to half of the API's
CPU time in ``POST /runs/batch``. :func:`hiredis_packing` gives a connection
class the blocking connections' packer, with the same results: str as UTF-8,
int and float as their ``repr``, bytes as is, and ``DataError`` for anything
else (None, bool), as redis-py's own encoder answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from redis.exceptions import DataError
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

C = TypeVar("C", bound=type)


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP; ``DataError`` for an argument Redis has no form for.

    As redis-py does, a command name holding spaces (``"CONFIG GET"``) is sent
    as its words. Buffers (bytearray, memoryview) are copied to bytes first.
    """
    first = args[0]
    if isinstance(first, str):
        if " " in first:
            args = (*first.encode().split(), *args[1:])
    elif b" " in first:
        args = (*first.split(), *args[1:])
    try:
        return hiredis.pack_command(args)  # type: ignore[no-any-return]
    except TypeError:
        buffers = (bytearray, memoryview)
        plain: tuple[Any, ...] = tuple(bytes(a) if isinstance(a, buffers) else a for a in args)
        try:
            return hiredis.pack_command(plain)  # type: ignore[no-any-return]
        except TypeError as exc:
            raise DataError(str(exc)) from None


class _HiredisPacking:
    """Mixin: ``pack_command``/``pack_commands`` through hiredis (one buffer per pipeline)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        """One command in RESP."""
        return [pack(args)]

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> list[bytes]:
        """A pipeline's commands in RESP, as one buffer: one socket write."""
        return [b"".join([pack(tuple(command)) for command in commands])]


_PACKED: dict[type, type] = {}


def hiredis_packing(connection_class: C) -> C:
    """``connection_class`` packing with hiredis; itself unchanged when hiredis is missing.

    One subclass per class, made once: every pool of a process shares it.
    """
    if not HIREDIS_AVAILABLE or issubclass(connection_class, _HiredisPacking):
        return connection_class
    if connection_class not in _PACKED:
        name = f"Hiredis{connection_class.__name__}"
        _PACKED[connection_class] = type(name, (_HiredisPacking, connection_class), {})
    packed: C = _PACKED[connection_class]  # type: ignore[assignment]
    return packed
