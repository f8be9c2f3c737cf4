"""Loads the Lua transitions in ``scripts/lua`` and calls them by SHA.

Each file is named ``<transition>-<key count>.lua``; a ``--- @include <name>``
line is replaced by ``includes/<name>.lua`` so helpers exist once. Calls use
EVALSHA and fall back to loading the script when Redis answers NOSCRIPT (after
a restart or a ``SCRIPT FLUSH``), so no caller ever sees that error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

_FILE_NAME = re.compile(r"^(?P<name>[a-z_]+)-(?P<numkeys>\d+)\.lua$")
_INCLUDE = re.compile(r"^--- @include (?P<name>[a-z_]+)$", re.MULTILINE)

ScriptArg = str | int | float


class ScriptCode(StrEnum):
    """Every status code a script returns as its first value (or per item)."""

    OK = "OK"
    LOST = "LOST"
    CANCEL = "CANCEL"
    RETRY = "RETRY"
    NOT_FOUND = "NOT_FOUND"
    INVALID = "INVALID"
    REPLAYED = "REPLAYED"
    CONFLICT = "CONFLICT"
    UNKNOWN = "UNKNOWN"


def lua_dir() -> Path:
    """Where the scripts live: inside the installed package, else the checkout."""
    packaged = Path(__file__).resolve().parent.parent / "lua"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / "scripts" / "lua"


@dataclass(frozen=True)
class Script:
    """One transition: its source (includes spliced in), SHA and key count."""

    name: str
    numkeys: int
    source: str
    sha: str


def load_scripts(directory: Path | None = None) -> dict[str, Script]:
    """Read every transition script once; raises FileNotFoundError if none exist."""
    directory = directory or lua_dir()
    scripts: dict[str, Script] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _FILE_NAME.match(path.name)
        if not match:
            raise ValueError(f"script file {path.name} is not named <transition>-<keys>.lua")
        source = _INCLUDE.sub(
            lambda m: (directory / "includes" / f"{m['name']}.lua").read_text(), path.read_text()
        )
        sha = hashlib.sha1(source.encode()).hexdigest()
        scripts[match["name"]] = Script(match["name"], int(match["numkeys"]), source, sha)
    if not scripts:
        raise FileNotFoundError(f"no Lua scripts found in {directory}")
    return scripts


@dataclass(frozen=True)
class ScriptCall:
    """One script invocation, so several can share a pipeline round trip."""

    name: str
    keys: Sequence[str]
    args: Sequence[ScriptArg]


class Scripts:
    """Calls transitions by name on a sync or async Redis client."""

    def __init__(self, scripts: dict[str, Script] | None = None) -> None:
        self._scripts = scripts or load_scripts()

    def __contains__(self, name: str) -> bool:
        return name in self._scripts

    @property
    def names(self) -> list[str]:
        """Every loaded transition name."""
        return sorted(self._scripts)

    def _resolve(self, call: ScriptCall) -> Script:
        script = self._scripts[call.name]
        if len(call.keys) != script.numkeys:
            raise ValueError(f"{call.name} takes {script.numkeys} keys, got {len(call.keys)}")
        return script

    async def load_all(self, client: aioredis.Redis) -> None:
        """SCRIPT LOAD every transition (startup, readiness, after NOSCRIPT)."""
        pipe = client.pipeline(transaction=False)
        for script in self._scripts.values():
            pipe.script_load(script.source)
        await pipe.execute()

    async def loaded(self, client: aioredis.Redis) -> bool:
        """Whether Redis has every script cached (for /readyz)."""
        shas = [script.sha for script in self._scripts.values()]
        present = await client.script_exists(*shas)
        return all(present)

    async def call(
        self, client: aioredis.Redis, name: str, keys: Sequence[str], args: Sequence[ScriptArg]
    ) -> Any:
        """Run one transition; loads it and retries once on NOSCRIPT."""
        script = self._resolve(ScriptCall(name, keys, args))
        try:
            return await client.evalsha(script.sha, script.numkeys, *keys, *args)
        except NoScriptError:
            await self.load_all(client)
            return await client.evalsha(script.sha, script.numkeys, *keys, *args)

    async def pipeline(self, client: aioredis.Redis, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several transitions in one round trip, in order.

        A call answered NOSCRIPT never ran, so after loading the scripts only those
        calls are sent again (in their original order). Any other error is raised.
        """
        pipe = client.pipeline(transaction=False)
        for call in calls:
            script = self._resolve(call)
            pipe.evalsha(script.sha, script.numkeys, *call.keys, *call.args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:
            await self.load_all(client)
            retried = await self.pipeline(client, [calls[i] for i in missing])
            for i, result in zip(missing, retried, strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    def call_sync(
        self, client: redis.Redis, name: str, keys: Sequence[str], args: Sequence[ScriptArg]
    ) -> Any:
        """Blocking twin of :meth:`call`, for the heartbeat thread's own connection."""
        script = self._resolve(ScriptCall(name, keys, args))
        try:
            return client.evalsha(script.sha, script.numkeys, *keys, *args)
        except NoScriptError:
            client.script_load(script.source)
            return client.evalsha(script.sha, script.numkeys, *keys, *args)
