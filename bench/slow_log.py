"""Every command a benchmark's redis-server ran, with its own time (slowlog at threshold 0).

Redis' slow log gives each command's execution time on the server, without the round trip
or the client's Python: the figure for "what does this script cost Redis". Used by
``bench.heartbeat`` (a renewal's server time) and ``bench.create_cold`` (a create's server
time after the machine has idled).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from app.store.lua.scripts import load_scripts

SLOWLOG_DEFAULT_US = 10_000
SLOWLOG_DEFAULT_LEN = 128
SLOWLOG_RECORDING_LEN = 1_000_000
SCRIPT_CLIENT = "?:0"  # slowlog's client address for commands run by a script


@contextlib.asynccontextmanager
async def every_command(client: aioredis.Redis) -> AsyncIterator[list[dict[str, Any]]]:
    """Record every command run inside the block; the list yielded is filled on exit.

    The server's slow log is set back to Redis' defaults afterwards, so a later benchmark on
    the same server is not slowed by logging every command.
    """
    entries: list[dict[str, Any]] = []
    await client.config_set("slowlog-max-len", SLOWLOG_RECORDING_LEN)
    await client.config_set("slowlog-log-slower-than", 0)
    await client.slowlog_reset()
    try:
        yield entries
    finally:
        await client.config_set("slowlog-log-slower-than", SLOWLOG_DEFAULT_US)
        entries.extend(await client.slowlog_get(-1))
        await client.config_set("slowlog-max-len", SLOWLOG_DEFAULT_LEN)


def _text(value: bytes | str) -> str:
    # redis-py leaves slowlog's command and address as bytes even when decoding replies
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def by_script(entries: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Durations (us) of the top-level commands clients sent, EVALSHA named by script.

    Commands a script runs are logged too, from client address ``?:0``; they
    are part of their script's duration, not calls of their own.
    """
    names = {script.sha: name for name, script in load_scripts().items()}
    grouped: dict[str, list[int]] = {}
    for entry in entries:
        argv = _text(entry["command"]).split()
        command = argv[0].lower()
        if _text(entry["client_address"]) == SCRIPT_CLIENT or command in ("config", "slowlog"):
            continue  # inside a script, or the benchmark's own call
        if command == "evalsha":
            command = f"evalsha:{names.get(argv[1], argv[1][:8])}"
        grouped.setdefault(command, []).append(int(entry["duration"]))
    return grouped
