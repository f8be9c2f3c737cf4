"""Loads the Lua transitions in ``scripts/lua`` and calls them by SHA.

Each file is named ``<transition>-<key count>.lua`` and lives in the folder of its
capability (``scripts/lua/<room>/``, the same name as the store's room that sends it:
``leases/claim_runs-6.lua`` beside ``app/store/leases``); a ``--- @include <name>``
line is replaced by the definitions of ``includes/<name>.lua`` that the script uses
(:mod:`app.store.lua.splicing`), so helpers exist once. Every
script is loaded with a Redis 7 shebang (``#!lua``) declaring how it behaves
when Redis is full (see :data:`SCRIPT_FLAGS`): unflagged, Redis refuses the
whole call up front past ``maxmemory`` instead of failing at the first write
that may grow memory, after earlier writes already stood. Redis 6.2 cannot
compile a shebang: the first time it refuses one, this process switches to the
same scripts without it (and without the memory guarantees; see the README). Calls use
EVALSHA and fall back to EVAL with the source when Redis answers NOSCRIPT (after
a restart, a ``SCRIPT FLUSH`` or a failover to a node that never loaded it),
which caches the script on that node, so no caller ever sees that error.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

from app.store.lua import spliced_cache
from app.store.lua.splicing import (
    ArgumentRecords,
    MissingInclude,
    UnknownArgument,
    name_arguments,
    splice_includes,
)
from app.store.redis.connection import AsyncRedis, SyncRedis

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

_FILE_NAME = re.compile(r"^(?P<name>[a-z_]+)-(?P<numkeys>\d+)\.lua$")

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
    SINGLETON = "SINGLETON"
    UNKNOWN = "UNKNOWN"
    LIMITED = "LIMITED"
    TIMEOUT = "TIMEOUT"
    FULL = "FULL"


def lua_dir() -> Path:
    """Where the scripts live: inside the installed package (``app/lua``), else the checkout."""
    app_dir = Path(__file__).resolve().parents[2]  # app/store/lua/scripts.py -> app
    packaged = app_dir / "lua"
    if packaged.is_dir():
        return packaged
    return app_dir.parent / "scripts" / "lua"


@dataclass(frozen=True)
class Script:
    """One transition: its source (includes spliced in), SHA and key count."""

    name: str
    numkeys: int
    source: str
    sha: str
    # the same script without its shebang, for Redis 6.2 (no script flags)
    legacy_source: str = ""
    legacy_sha: str = ""

    def variant(self, *, flags: bool) -> tuple[str, str]:
        """(source, sha) with the shebang (Redis 7+) or without it."""
        return (self.source, self.sha) if flags else (self.legacy_source, self.legacy_sha)


INCLUDES_DIR = "includes"


def script_files(directory: Path) -> list[Path]:
    """Every transition's file: ``<room>/<transition>-<keys>.lua``, rooms in name order."""
    return sorted(
        path
        for path in directory.glob("*/*.lua")
        if path.parent.name != INCLUDES_DIR and not path.parent.name.startswith("_")
    )


def load_scripts(
    directory: Path | None = None, arguments: Mapping[str, ArgumentRecords] | None = None
) -> dict[str, Script]:
    """Read every transition script once; raises FileNotFoundError if none exist.

    Each is spliced (:func:`~app.store.lua.splicing.splice_includes`) and its argument
    names made numbers (:func:`~app.store.lua.splicing.name_arguments`, from
    ``arguments``: by default every binding's records) at most once per version of its
    files and records: a start whose files were spliced before reads the result from
    :mod:`app.store.lua.spliced_cache` (~3 ms instead of ~10).
    """
    if arguments is None:
        # the rooms' bindings, imported here: the machinery's module imports no room
        from app.store.lua.registry import argument_records

        arguments = argument_records()
    directory = directory or lua_dir()
    texts: dict[str, str] = {}
    numkeys: dict[str, int] = {}
    for path in script_files(directory):
        match = _FILE_NAME.match(path.name)
        if not match:
            raise ValueError(f"script file {path.name} is not named <transition>-<keys>.lua")
        if match["name"] in texts:
            raise ValueError(f"two scripts are named {match['name']}")
        texts[match["name"]] = path.read_text()
        numkeys[match["name"]] = int(match["numkeys"])
    if not texts:
        raise FileNotFoundError(f"no Lua scripts found in {directory}")
    includes = {path.stem: path.read_text() for path in (directory / INCLUDES_DIR).glob("*.lua")}
    made_of = spliced_cache.key(texts, includes, arguments)
    bodies = spliced_cache.read(directory, made_of, texts.keys())
    if bodies is None:
        bodies = {
            name: _spliced(name, text, includes, arguments.get(name))
            for name, text in texts.items()
        }
        spliced_cache.write(directory, made_of, bodies)
    scripts: dict[str, Script] = {}
    for name, body in bodies.items():
        source = shebang(name) + body
        scripts[name] = Script(name, numkeys[name], source, _sha1(source), body, _sha1(body))
    return scripts


def _spliced(
    name: str, text: str, includes: dict[str, str], arguments: ArgumentRecords | None
) -> str:
    """The script with its includes spliced in and its argument names made numbers."""
    try:
        body = splice_includes(text, includes)
        return body if arguments is None else name_arguments(body, arguments)
    except (MissingInclude, UnknownArgument) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def refuses_shebang(exc: BaseException) -> bool:
    """Whether Redis failed to compile a script for its ``#!lua`` line (Redis before 7)."""
    return isinstance(exc, ResponseError) and "near '#'" in str(exc)


@dataclass(frozen=True)
class ScriptCall:
    """One script invocation, so several can share a pipeline round trip."""

    name: str
    keys: Sequence[str]
    args: Sequence[ScriptArg]
    # a failover must not lose it once acknowledged: WAIT for replicas follows it when
    # replica acks are asked for (each binding in app/store/lua/transition.py says)
    durable: bool = False


# How each transition behaves when Redis is out of memory (``used_memory`` past
# ``maxmemory``, ``noeviction``). ``allow-oom``: the writes of work already running
# (renewals, terminal outcomes, releases, checkpoints, effect records) and the
# cleanup that frees memory or stops work (reconcile, expire, delete, cancel) still
# run, so nothing a handler returned is lost; each writes a bounded amount (one
# run's outcome, state or effect record, all capped by settings). ``no-writes``: reads run
# anywhere. Every other transition (create, claim, events, ...) is refused whole,
# before it writes anything: new work and handler chatter are what give way.
SCRIPT_FLAGS: dict[str, str] = {
    "renew_leases": "allow-oom",
    "finish_runs": "allow-oom",
    "release_runs": "allow-oom",
    "reconcile_expired": "allow-oom",
    "checkpoint_run": "allow-oom",
    "record_effect": "allow-oom",
    "park_run": "allow-oom",  # a running handler gives its lease back: it frees, not grows
    "cancel_run": "allow-oom",
    "delete_run": "allow-oom",  # frees memory: what an operator does when Redis is full
    "expire_queued": "allow-oom",
    "undeclare_queue": "allow-oom",  # frees a declaration: never refused for memory
    # pause (and resume, PATCH) must stop a schedule when Redis is full: one record, its
    # fields bounded; what would grow (a create, a new run input) the API admits first
    "put_schedule": "allow-oom",
    # a bulk retry's save (and its cancel): one record's bounded fields
    "commit_operation": "allow-oom",
    # a 429 must slow everyone even when Redis is full: one bounded SET, and it stops work
    "push_bucket": "allow-oom",
    "read_events": "no-writes",
}


def shebang(name: str) -> str:
    """The first line Redis reads the script's flags from (Redis 7's ``#!lua flags=...``)."""
    flags = SCRIPT_FLAGS.get(name)
    return f"#!lua flags={flags}\n" if flags else "#!lua\n"


@dataclass(frozen=True)
class ReplicaAcks:
    """``WAIT replicas timeout_ms`` after every durable transition (``LEASEHOLD_REPLICA_ACKS``).

    WAIT blocks the connection until that many replicas have every write it made,
    or the timeout passes. It narrows the window in which a failover loses an
    acknowledged write; it does not make replication synchronous.
    """

    replicas: int
    timeout_ms: int


class Scripts:
    """Calls transitions by name on a sync or async Redis client, in any connection mode.

    In cluster mode every call goes to the primary of its keys' slot (all keys of
    one call share the queue's hash tag). Scripts are cached per node, and a node
    that lacks one (a restart, a ``SCRIPT FLUSH``, a replica just promoted) answers
    NOSCRIPT: the call is then sent again as EVAL with the source, which runs it
    on that same node and caches it there, so no caller ever sees the error.
    """

    def __init__(
        self, scripts: dict[str, Script] | None = None, *, replica_acks: ReplicaAcks | None = None
    ) -> None:
        self._scripts = scripts or load_scripts()
        self.replica_acks = replica_acks if replica_acks and replica_acks.replicas > 0 else None
        self.short_acks = 0  # durable writes fewer replicas than asked for acknowledged in time
        self.flags = True  # Redis takes script flags (7+); False once it refused a shebang

    @classmethod
    def for_settings(cls, settings: Settings) -> Scripts:
        """Every transition, with the replica acknowledgements ``settings`` ask for."""
        return cls(replica_acks=ReplicaAcks(settings.replica_acks, settings.replica_ack_timeout_ms))

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

    def _command(self, call: ScriptCall, *, by_source: bool = False) -> list[ScriptArg]:
        """The EVALSHA command of a call, or the EVAL one that also caches the script."""
        script = self._resolve(call)
        source, sha = script.variant(flags=self.flags)
        head: list[ScriptArg] = ["EVAL", source] if by_source else ["EVALSHA", sha]
        return [*head, script.numkeys, *call.keys, *call.args]

    def _without_flags(self, exc: BaseException) -> bool:
        """Switch to the shebang-less scripts when ``exc`` says Redis cannot read one."""
        if not self.flags or not refuses_shebang(exc):
            return False
        log.warning(
            "Redis cannot read script flags (it is older than 7.0): running the scripts "
            "without them, so at maxmemory renewals and terminal writes are refused too"
        )
        self.flags = False
        return True

    async def load_all(self, client: AsyncRedis) -> None:
        """SCRIPT LOAD every transition (startup, readiness): on every primary of a cluster.

        Loading up front makes a broken script fail at start, not on first use. Scripts
        Redis already holds (another worker's, an earlier start's: same source, same
        SHA-1, so they compiled) are not sent again: that is ~1.1 MB of Lua and a round
        trip of ~20 ms before a worker's first claim, for one SCRIPT EXISTS instead.
        """
        if await self._all_cached(client):
            return
        try:
            await self._load_all(client)
        except ResponseError as exc:
            if not self._without_flags(exc):
                raise
            await self._load_all(client)

    async def _all_cached(self, client: AsyncRedis) -> bool:
        """Whether every script is cached already; a refused SCRIPT EXISTS counts as no.

        Refused (an ACL without ``script``): SCRIPT LOAD is then refused too, and that
        refusal is the one the caller reports, as it was before this check.
        """
        try:
            return await self.loaded(client)
        except ResponseError:
            return False

    async def _load_all(self, client: AsyncRedis) -> None:
        sources = [script.variant(flags=self.flags)[0] for script in self._scripts.values()]
        if isinstance(client, aioredis.RedisCluster):
            # redis-py sends SCRIPT LOAD to every primary; a cluster pipeline refuses it
            await asyncio.gather(*(client.script_load(source) for source in sources))
            return
        pipe = client.pipeline(transaction=False)
        for source in sources:
            pipe.script_load(source)
        await pipe.execute()

    async def loaded(self, client: AsyncRedis) -> bool:
        """Whether Redis (every primary, in cluster mode) has every script cached."""
        shas = [script.variant(flags=self.flags)[1] for script in self._scripts.values()]
        present = await client.script_exists(*shas)
        return all(present)

    def _durable(self, calls: Sequence[ScriptCall]) -> ReplicaAcks | None:
        if self.replica_acks and any(call.durable for call in calls):
            return self.replica_acks
        return None

    async def run(self, client: AsyncRedis, call: ScriptCall) -> Any:
        """Run one transition (followed by WAIT when it is durable and acks are asked for)."""
        keys, args = call.keys, call.args
        if self._durable([call]):
            return (await self.pipeline(client, [call]))[0]
        script = self._resolve(call)
        source, sha = script.variant(flags=self.flags)
        try:
            return await client.evalsha(sha, script.numkeys, *keys, *args)
        except NoScriptError:
            pass
        try:
            return await client.eval(source, script.numkeys, *keys, *args)
        except ResponseError as exc:
            if not self._without_flags(exc):
                raise
        source = script.variant(flags=False)[0]
        return await client.eval(source, script.numkeys, *keys, *args)

    async def pipeline(
        self, client: AsyncRedis, calls: Sequence[ScriptCall], *, raise_on_error: bool = True
    ) -> list[Any]:
        """Run several transitions of one queue in one round trip, in order.

        With :attr:`replica_acks` and a durable transition among them, the round
        trip ends with WAIT on the same connection, i.e. on the node that ran them.
        A call answered NOSCRIPT never ran: only those calls are sent again, as
        EVAL, in their original order. Any other error reply is raised, or with
        ``raise_on_error=False`` returned in its call's place (the other calls ran:
        e.g. a terminal write stands when the claim beside it was refused).
        """
        results = await self._round_trip(client, calls, by_source=False)
        for attempt in range(2):  # the second only after switching to shebang-less scripts
            missing = [
                i
                for i, result in enumerate(results)
                if isinstance(result, NoScriptError) or (attempt and refuses_shebang(result))
            ]
            if not missing:
                break
            retried = await self._round_trip(client, [calls[i] for i in missing], by_source=True)
            for i, result in zip(missing, retried, strict=True):
                results[i] = result
            if not any(self._without_flags(result) for result in retried):
                break
        for result in results:
            if raise_on_error and isinstance(result, Exception):
                raise result
        return results

    async def _round_trip(
        self, client: AsyncRedis, calls: Sequence[ScriptCall], *, by_source: bool
    ) -> list[Any]:
        acks = self._durable(calls)
        if acks is None and isinstance(client, aioredis.Redis):
            commands = [self._command(call, by_source=by_source) for call in calls]
            return await _on_one_connection(client, commands)
        pipe = client.pipeline(transaction=False)
        for call in calls:
            # execute_command, not pipe.evalsha: redis-py's cluster pipeline refuses the latter
            pipe.execute_command(*self._command(call, by_source=by_source))
        if acks is not None:
            routing = await _same_node(client, calls)
            pipe.execute_command("WAIT", acks.replicas, acks.timeout_ms, **routing)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        if acks is not None:
            acked = results.pop()
            if not any(isinstance(result, Exception) for result in results):
                self._check_acks(acks, acked, calls)
        return results

    def _check_acks(self, acks: ReplicaAcks, acked: object, calls: Sequence[ScriptCall]) -> None:
        """Count and log a WAIT that came back short: the writes stand, but less durably."""
        if isinstance(acked, int) and acked >= acks.replicas:
            return
        self.short_acks += 1
        answer = (
            f"{acked} of {acks.replicas} replicas acknowledged within {acks.timeout_ms} ms"
            if isinstance(acked, int)
            else f"WAIT failed ({acked})"
        )
        log.warning(
            "%s under-replicated: %s; a failover now could lose it",
            ",".join(call.name for call in calls),
            answer,
        )

    def run_sync(self, client: SyncRedis, call: ScriptCall) -> Any:
        """Blocking twin of :meth:`run`, for the heartbeat thread's own connection.

        Used for renewals only, which are not durable transitions: no WAIT here.
        """
        keys, args = call.keys, call.args
        script = self._resolve(call)
        source, sha = script.variant(flags=self.flags)
        try:
            return client.evalsha(sha, script.numkeys, *keys, *args)
        except NoScriptError:
            pass
        try:
            return client.eval(source, script.numkeys, *keys, *args)
        except ResponseError as exc:
            if not self._without_flags(exc):
                raise
        return client.eval(script.variant(flags=False)[0], script.numkeys, *keys, *args)


async def _on_one_connection(client: aioredis.Redis, commands: list[list[ScriptArg]]) -> list[Any]:
    """Send ``commands`` in one write on one pooled connection and read one reply each.

    What redis-py's pipeline does for them (one packed write, a reply or an error reply
    per command in its place, the client's retry policy around the whole exchange with
    a reconnect between attempts, the health check before a write on a connection idle
    too long), without its per-trip machinery: the command stack, the response
    callbacks (EVALSHA has none) and the operation recorders. That machinery was a
    third of the worker's CPU per round trip (issue 19 aim 1: ~150-250 of ~750-1,000
    us per trip of 25 outcomes and a claim of 25, ``time.thread_time``). A reply not
    read (a cancel, a timeout, a cut connection) disconnects the connection before it
    goes back to the pool, as redis-py's reads do, so no later caller reads it.
    """
    pool = client.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    packed = connection.pack_commands(commands)

    async def exchange() -> list[Any]:
        await connection.send_packed_command(packed)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as exc:  # an error reply, in its command's place
                replies.append(exc)
        return replies

    async def reconnect(_error: Exception) -> None:
        await connection.disconnect()

    try:
        return await connection.retry.call_with_retry(exchange, reconnect)  # type: ignore[no-any-return]
    finally:
        await pool.release(connection)


async def _same_node(client: AsyncRedis, calls: Sequence[ScriptCall]) -> dict[str, Any]:
    """Routing for WAIT: the node serving the calls' slot (WAIT has no key of its own).

    The slot map must exist before it can be read: a fresh client builds it first.
    """
    if isinstance(client, aioredis.RedisCluster):
        await client.initialize()  # a no-op once the map is built
        return {"target_nodes": client.get_node_from_key(calls[0].keys[0])}
    return {}
