"""Rate limits: declared keys and their GCRA buckets in Redis.

An operator declares a key (``openai``) or a template (``crm:{tenant}``, whose
``{tenant}`` stands for any one segment) with a :class:`~app.models.read.RateLimitSpec`;
the declarations live in one hash (``GlobalKeys.rate_limits``), at most
``LEASEHOLD_MAX_RATE_LIMITS`` of them. A concrete key resolves to its exact
declaration first, else to the first template (by name) that matches it.

Each concrete key has buckets, one GCRA TAT string each (``the Lua includes`` explains the
algorithm; the Redis clock is the only clock):

* the *handler bucket* ``<prefix>:rl:{<key>}`` (``take_tokens``, ``push_bucket``),
  under a hash tag of its own, so every queue and worker shares it;
* a *start bucket* per queue ``<prefix>:{<queue>}:rl:<key>``, which ``claim_runs``
  consults (``rate_gate``) for runs that name the key in ``rate_limits``: a claim
  runs in its queue's slot, so starts are counted per queue.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from app.errors import RateLimitNotDeclared, RateLimitsFull
from app.models import RATE_LIMIT_KEY, RATE_LIMIT_TEMPLATE
from app.models.read import BucketState, RateLimitInfo, RateLimitSpec
from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import ScriptCall, ScriptCode, Scripts
from app.store.ratelimits.bindings import (
    DECLARE_RATE_LIMIT,
    PUSH_BUCKET,
    TAKE_TOKENS,
    DeclareRateLimitArgs,
    PushArgs,
    TakeArgs,
    TakeReply,
)
from app.store.redis.connection import AsyncRedis

# bucket reads one round trip of GET /rate-limits sends (LEASEHOLD_MAX_RATE_LIMITS' default)
READ_CHUNK = 1000

# how long a process trusts its copy of the declarations: a changed spec reaches every
# worker within this long, and a take costs one round trip, not two
DECLARATIONS_TTL_S = 1.0


@dataclass(frozen=True)
class Declared:
    """A concrete key with the declaration that covers it (``name``: the key or template)."""

    key: str
    name: str
    spec: RateLimitSpec


@dataclass(frozen=True)
class Token:
    """A take's answer: ``granted`` tokens usable ``wait_ms`` from ``now_ms`` (Redis clock).

    Not granted: nothing was taken, and ``wait_ms`` is when this cost would pass.
    """

    granted: bool
    wait_ms: int
    now_ms: int
    remaining: int

    @property
    def until_ms(self) -> int:
        """Epoch ms (Redis clock) at which the token may be used."""
        return self.now_ms + self.wait_ms


@dataclass(frozen=True)
class StartGate:
    """One start bucket a run waits on: its key, the spec it was created with, its cost."""

    bucket: str
    spec: RateLimitSpec
    cost: int = 1

    @classmethod
    def of(cls, declared: Declared, cost: int = 1) -> StartGate:
        """The gate of a resolved key (the spec is fixed when the run is created)."""
        return cls(declared.key, declared.spec, cost)


def start_gates_arg(gates: tuple[StartGate, ...]) -> str:
    """A run's ``rate_limits`` as create_run takes it: [bucket, limit, period_ms, burst, cost]."""
    if not gates:
        return ""
    rows = [[g.bucket, g.spec.limit, g.spec.period_ms, g.spec.burst, g.cost] for g in gates]
    return json.dumps(rows, separators=(",", ":"))


def is_template(name: str) -> bool:
    """Whether a declared name is a template (has a ``{segment}``)."""
    return "{" in name


def valid_name(name: str) -> bool:
    """Whether ``name`` may be declared: a concrete key or a template."""
    return RATE_LIMIT_KEY.fullmatch(name) is not None or (
        RATE_LIMIT_TEMPLATE.fullmatch(name) is not None
    )


def matches(template: str, key: str) -> bool:
    """Whether concrete ``key`` is an instance of ``template`` (segment by segment)."""
    wanted, parts = template.split(":"), key.split(":")
    if len(wanted) != len(parts):
        return False
    return all(
        w == p or (w.startswith("{") and w.endswith("}"))
        for w, p in zip(wanted, parts, strict=True)
    )


def _token(reply: TakeReply) -> Token:
    return Token(reply.granted, reply.wait_ms, reply.now_ms, reply.remaining)


def _state(key: str, token: Token) -> BucketState:
    at = datetime.fromtimestamp(token.until_ms / 1000, tz=UTC)
    return BucketState(bucket=key, available=token.remaining, next_token_at=at)


class RateLimitStore:
    """Declares rate-limit keys and takes, pushes and reads their buckets."""

    def __init__(self, client: AsyncRedis, *, scripts: Scripts, prefix: str, max_keys: int) -> None:
        self.client = client
        self.scripts = scripts
        self.keys = GlobalKeys(prefix)
        # the bindings build these cross-queue keys from a QueueKeys' prefix alone
        self._binding_keys = QueueKeys(prefix, "")
        self.max_keys = max_keys
        self._cache: dict[str, RateLimitSpec] = {}
        self._cached_at = -DECLARATIONS_TTL_S

    # -- declarations ---------------------------------------------------------------

    async def declare(self, name: str, spec: RateLimitSpec) -> bool:
        """Declare (or change) ``name``; True when it is new.

        Raises :class:`RateLimitsFull` past ``max_keys``; ``name`` must pass
        :func:`valid_name` (the API checks it).
        """
        body = json.dumps(
            {"limit": spec.limit, "period_s": spec.period_s, "burst": spec.burst},
            allow_nan=False,
        )
        reply = await DECLARE_RATE_LIMIT.send(
            self.scripts,
            self.client,
            self._binding_keys,
            DeclareRateLimitArgs(name=name, spec=body, max_keys=self.max_keys),
        )
        self._cached_at = -DECLARATIONS_TTL_S
        if reply.code == ScriptCode.CONFLICT:
            raise RateLimitsFull(name, self.max_keys)
        return bool(reply.code == ScriptCode.OK)

    async def undeclare(self, name: str) -> bool:
        """Forget ``name``'s declaration; True when it was declared.

        Its buckets stay until their TATs pass (at most the time they were behind):
        re-declaring it soon keeps the pace it had.
        """
        removed = await self.client.hdel(self.keys.rate_limits, name)
        self._cached_at = -DECLARATIONS_TTL_S
        return bool(removed)

    async def declared(self, *, fresh: bool = False) -> dict[str, RateLimitSpec]:
        """Every declaration by name (cached for ``DECLARATIONS_TTL_S`` unless ``fresh``)."""
        if fresh or time.monotonic() - self._cached_at >= DECLARATIONS_TTL_S:
            raw = await self.client.hgetall(self.keys.rate_limits)
            self._cache = {
                _text(name): RateLimitSpec.model_validate_json(body) for name, body in raw.items()
            }
            self._cached_at = time.monotonic()
        return self._cache

    async def resolve(self, key: str, *, fresh: bool = False) -> Declared:
        """The declaration covering concrete ``key``: exact first, else the first template.

        Raises :class:`RateLimitNotDeclared` when none does (or ``key`` is malformed).
        """
        if RATE_LIMIT_KEY.fullmatch(key) is None:
            raise RateLimitNotDeclared(key)
        declared = await self.declared(fresh=fresh)
        if key in declared:
            return Declared(key, key, declared[key])
        for name in sorted(declared):
            if is_template(name) and matches(name, key):
                return Declared(key, name, declared[name])
        raise RateLimitNotDeclared(key)

    # -- buckets --------------------------------------------------------------------

    def _bucket_key(self, key: str, queue: str | None) -> str:
        """The handler bucket of ``key``, or (with ``queue``) that queue's start bucket."""
        if queue is None:
            return self.keys.bucket(key)
        return QueueKeys(self.keys.prefix, queue).start_bucket(key)

    async def take(
        self, declared: Declared, *, cost: int, max_wait_ms: int, queue: str | None = None
    ) -> Token:
        """Take ``cost`` tokens from the handler bucket, reserving up to ``max_wait_ms`` ahead.

        Granted with ``wait_ms > 0``: the tokens are reserved for then (sleep, then
        use them). Not granted: nothing taken. ``cost`` must be within 0..burst.
        ``queue`` reads that queue's start bucket instead (with ``cost=0`` only: starts
        are taken by claim_runs).
        """
        call = self._take_call(declared, cost=cost, max_wait_ms=max_wait_ms, queue=queue)
        return _token(TAKE_TOKENS.decode(await self.scripts.run(self.client, call)))

    def _take_call(
        self, declared: Declared, *, cost: int, max_wait_ms: int, queue: str | None = None
    ) -> ScriptCall:
        spec = declared.spec
        args = TakeArgs(spec.limit, spec.period_ms, spec.burst, cost, max_wait_ms)
        bucket_key = self._bucket_key(declared.key, queue)
        return TAKE_TOKENS.call(self._binding_keys, args, bucket_key)

    async def take_quota(self, name: str, *, per_second: int, cost: int) -> Token:
        """Take ``cost`` from this namespace's rate quota ``name`` (``creates``,
        ``signals``): ``per_second`` a second with one second's worth of burst; never
        reserves ahead. ``cost`` must be within 1..per_second."""
        args = TakeArgs(per_second, 1000, per_second, cost, 0)
        call = TAKE_TOKENS.call(self._binding_keys, args, self.keys.quota_bucket(name))
        return _token(TAKE_TOKENS.decode(await self.scripts.run(self.client, call)))

    async def push(self, declared: Declared, *, retry_after_ms: int) -> Token:
        """An upstream said 429: nobody takes from the bucket for ``retry_after_ms``.

        Returns when a token passes again (``until_ms``, Redis clock); nothing is taken.
        """
        spec = declared.spec
        args = PushArgs(spec.limit, spec.period_ms, spec.burst, retry_after_ms)
        reply = await PUSH_BUCKET.send(
            self.scripts,
            self.client,
            self._binding_keys,
            args,
            self._bucket_key(declared.key, None),
        )
        return Token(False, reply.until_ms - reply.now_ms, reply.now_ms, 0)

    async def state(self, declared: Declared, queue: str | None = None) -> BucketState:
        """The handler bucket (or ``queue``'s start bucket) now: tokens, and the next one."""
        token = await self.take(declared, cost=0, max_wait_ms=0, queue=queue)
        return _state(declared.key, token)

    async def infos(self) -> list[RateLimitInfo]:
        """Every declaration with its handler bucket's state (templates: none), by name.

        Two round trips, however many are declared: the declarations, then every
        key's bucket read (``take_tokens`` with cost 0, as :meth:`state` reads one) in
        one pipeline, ``READ_CHUNK`` calls per round trip (one at the default
        LEASEHOLD_MAX_RATE_LIMITS). A pipeline, not one script over every bucket:
        each bucket has a hash tag of its own, so on a cluster no script may hold two.
        """
        declared = sorted((await self.declared(fresh=True)).items())
        keys = [Declared(name, name, spec) for name, spec in declared if not is_template(name)]
        states: dict[str, BucketState] = {}
        for start in range(0, len(keys), READ_CHUNK):
            chunk = keys[start : start + READ_CHUNK]
            calls = [self._take_call(key, cost=0, max_wait_ms=0) for key in chunk]
            replies = await self.scripts.pipeline(self.client, calls)
            for key, reply in zip(chunk, replies, strict=True):
                states[key.key] = _state(key.key, _token(TAKE_TOKENS.decode(reply)))
        return [
            RateLimitInfo(key=name, template=is_template(name), spec=spec, state=states.get(name))
            for name, spec in declared
        ]

    async def info(self, key: str, queue: str | None = None) -> RateLimitInfo:
        """One key: its declaration, or for a template's instance the template's, and state.

        With ``queue``, also that queue's start bucket. Raises :class:`RateLimitNotDeclared`.
        """
        declared = await self.declared(fresh=True)
        if key in declared and is_template(key):
            return RateLimitInfo(key=key, template=True, spec=declared[key])
        found = await self.resolve(key)
        start = None if queue is None else await self.state(found, queue)
        return RateLimitInfo(
            key=key,
            template=False,
            spec=found.spec,
            state=await self.state(found),
            start_state=start,
        )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
