"""The asyncio clients pack commands with hiredis: the same bytes on the wire, the same values.

The packer is swapped for speed only, so what a test can observe is that
nothing else changed: every kind of argument this code sends is packed to
exactly the bytes redis-py's own packer produces, refused arguments are still
refused with DataError, and a long pipeline through the real Redis stores what
was sent.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from app.store.redis.connection import async_client
from app.store.redis.packing import hiredis_packing

ARGUMENTS: list[object] = [
    "plain",
    "é ünïcødé ✓",
    b"\xff\x00raw",
    0,
    -17,
    12345678901234567890,
    0.1,
    1e20,
    3.0,
    "",
    "x" * 100_000,  # past redis-py's buffer cut-off: it chunks, hiredis does not
    memoryview(b"a view"),
    bytearray(b"an array"),
]


def test_every_argument_packs_to_the_bytes_redis_py_sends() -> None:
    python = aioredis.Connection()
    packed = hiredis_packing(aioredis.Connection)()
    command = ("EVALSHA", "a" * 40, 2, *ARGUMENTS)
    assert b"".join(packed.pack_command(*command)) == b"".join(python.pack_command(*command))
    commands = [("SET", f"k{i}", value) for i, value in enumerate(ARGUMENTS)]
    assert b"".join(packed.pack_commands(commands)) == b"".join(python.pack_commands(commands))
    # a command name with a space is split into its words, as redis-py does
    assert packed.pack_command("CONFIG GET", "maxmemory") == [
        b"".join(python.pack_command("CONFIG GET", "maxmemory"))
    ]


@pytest.mark.parametrize("value", [None, True, object()])
def test_what_redis_py_refuses_is_still_refused(value: object) -> None:
    with pytest.raises(DataError):
        hiredis_packing(aioredis.Connection)().pack_command("SET", "k", value)


def test_one_subclass_per_connection_class() -> None:
    packed = hiredis_packing(aioredis.Connection)
    assert hiredis_packing(aioredis.Connection) is packed
    assert hiredis_packing(packed) is packed
    assert issubclass(packed, aioredis.Connection)


async def test_a_long_pipeline_stores_what_was_sent(redis_url: str, prefix: str) -> None:
    client = async_client(redis_url)
    try:
        assert client.connection_pool.connection_class.__name__.startswith("Hiredis")
        # text only: the client decodes answers as UTF-8
        values = [value for value in ARGUMENTS if isinstance(value, str | int | float)]
        pipe = client.pipeline(transaction=False)
        for i in range(2_000):
            pipe.set(f"{prefix}:k{i}", values[i % len(values)])  # type: ignore[arg-type]
        assert all(await pipe.execute())
        stored = await client.mget([f"{prefix}:k{i}" for i in range(len(values))])
        assert stored == [str(value) for value in values]
    finally:
        await client.aclose()
