"""API keys in Redis: one hash per key, one lookup hash per live secret, one index.

A secret is 32 random bytes (``secrets.token_urlsafe``), so storing its SHA-256 is
enough: nobody can guess a 256-bit value, and a digest cannot be inverted, so a copy of
Redis (a dump, a replica) holds no usable key. A slow password hash (bcrypt, argon2) is
for secrets people choose, short enough to try them all; it would cost every uncached
request milliseconds of CPU and buy nothing here.

Expiry and a rotation's grace are Redis key TTLs (``PEXPIRE``), so the Redis server's
clock judges them, as it judges leases: a lookup finds the digest or does not. Every
change is one ``MULTI`` (with ``WATCH`` where it reads first) on keys of one hash tag
(``{apikeys}``, :class:`app.store.keys.GlobalKeys`), so it holds on a Cluster too. The
key layout lives in :mod:`app.store.keys`.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from app.models.keys import KeyInfo, KeySecret, Role
from app.store.codec import ms_to_datetime
from app.store.keys import GlobalKeys
from app.store.redis.connection import AsyncRedis

SECRET_PREFIX = "lh_"


@dataclass(frozen=True)
class StoredKey:
    """What a presented secret resolves to: the key's id, name, role and namespace
    (None: every namespace, the request names one)."""

    key_id: str
    name: str
    role: Role
    namespace: str | None = None


def secret_digest(secret: bytes) -> str:
    """The hex SHA-256 a secret is stored and looked up by."""
    return hashlib.sha256(secret).hexdigest()


class KeyLimitReached(Exception):
    """``LEASEHOLD_MAX_API_KEYS`` live keys exist already."""


class KeyStore:
    """Create, list, rotate, revoke and look up stored keys; no caching (the API caches)."""

    def __init__(self, client: AsyncRedis, *, prefix: str, max_keys: int) -> None:
        self.client = client
        self.keys = GlobalKeys(prefix)
        self.max_keys = max_keys

    async def lookup(self, digest_hex: str) -> StoredKey | None:
        """The live key whose current (or in-grace previous) secret has this digest
        (:func:`secret_digest`), or None."""
        fields = cast(
            dict[str, str], await self.client.hgetall(self.keys.api_key_digest(digest_hex))
        )
        if not fields:
            return None
        return StoredKey(
            fields["id"], fields["name"], Role(fields["role"]), fields.get("namespace") or None
        )

    async def _transaction(self, change: Callable[[Any], Awaitable[None]], key: str) -> None:
        """``change`` under ``WATCH key``, again from the start if the key changed."""
        # redis-py types RedisCluster.transaction's callable as a coroutine object; both
        # clients call it with the pipeline, as the single-node one is typed
        client: Any = self.client
        await client.transaction(change, key)

    async def _now_ms(self) -> int:
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def create(
        self, *, name: str, role: Role, expires_in_s: int | None, namespace: str | None = None
    ) -> KeySecret:
        """A new key and its secret (returned once, stored only as a digest).

        Raises :class:`KeyLimitReached` past ``max_keys`` live keys.
        """
        now_ms = await self._now_ms()
        index = self.keys.api_key_index
        await self.client.zremrangebyscore(index, "-inf", now_ms)  # expired ones go first
        if await self.client.zcard(index) >= self.max_keys:
            raise KeyLimitReached(self.max_keys)
        key_id = "k" + secrets.token_hex(8)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        digest = secret_digest(secret.encode())
        ttl_ms = expires_in_s * 1000 if expires_in_s else None
        record: dict[str, Any] = {
            "id": key_id,
            "name": name,
            "role": role.value,
            "created_ms": now_ms,
            "expires_ms": now_ms + ttl_ms if ttl_ms else "",
            "digest": digest,
            "namespace": namespace or "",
        }
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.api_key(key_id), mapping=record)  # type: ignore[arg-type]
            pipe.hset(self.keys.api_key_digest(digest), mapping=_lookup(record))
            if ttl_ms:
                pipe.pexpire(self.keys.api_key(key_id), ttl_ms)
                pipe.pexpire(self.keys.api_key_digest(digest), ttl_ms)
            pipe.zadd(index, {key_id: now_ms + ttl_ms if ttl_ms else math.inf})
            await pipe.execute()
        return KeySecret(**_info(record).model_dump(), secret=secret)

    async def list(self) -> list[KeyInfo]:
        """Every live key, oldest first: never a secret nor a digest."""
        ids: list[str] = await self.client.zrangebyscore(  # type: ignore[assignment]
            self.keys.api_key_index, f"({await self._now_ms()}", "+inf"
        )
        async with self.client.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(self.keys.api_key(key_id))
            records = await pipe.execute()
        infos = [_info(record) for record in records if record]
        return sorted(infos, key=lambda info: (info.created_at, info.id))

    async def count(self) -> int:
        """How many keys are live (one ``ZCOUNT`` of the index, no record read)."""
        index = self.keys.api_key_index
        return int(await self.client.zcount(index, f"({await self._now_ms()}", "+inf"))

    async def rotate(self, key_id: str, *, grace_s: int) -> KeySecret | None:
        """A new secret for the key; the old one works ``grace_s`` more (never past the
        key's expiry), the one before it stops now. None when the key does not exist."""
        record_key = self.keys.api_key(key_id)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        digest = secret_digest(secret.encode())
        answer: dict[str, Any] = {}

        async def change(pipe: Any) -> None:
            record = await pipe.hgetall(record_key)
            ttl_ms = int(await pipe.pttl(record_key))
            now_ms = await self._now_ms()
            if not record:
                return
            grace_ms = grace_s * 1000 if ttl_ms < 0 else min(grace_s * 1000, ttl_ms)
            old, older = record["digest"], record.get("previous", "")
            record.update(
                digest=digest,
                previous=old,
                previous_until_ms=now_ms + grace_ms,
                rotated_ms=now_ms,
            )
            pipe.multi()
            pipe.hset(record_key, mapping=record)
            pipe.hset(self.keys.api_key_digest(digest), mapping=_lookup(record))
            if ttl_ms > 0:
                pipe.pexpire(self.keys.api_key_digest(digest), ttl_ms)
            if older:
                pipe.delete(self.keys.api_key_digest(older))
            if grace_ms > 0:
                pipe.pexpire(self.keys.api_key_digest(old), grace_ms)
            else:
                pipe.delete(self.keys.api_key_digest(old))
            answer.update(record)

        await self._transaction(change, record_key)
        if not answer:
            return None
        return KeySecret(**_info(answer).model_dump(), secret=secret)

    async def revoke(self, key_id: str) -> bool:
        """Delete the key and both its secrets' lookups; False when it did not exist."""
        record_key = self.keys.api_key(key_id)
        found: list[bool] = []

        async def change(pipe: Any) -> None:
            record = await pipe.hgetall(record_key)
            pipe.multi()
            for digest in (record.get("digest"), record.get("previous")):
                if digest:
                    pipe.delete(self.keys.api_key_digest(digest))
            pipe.delete(record_key)
            pipe.zrem(self.keys.api_key_index, key_id)
            found.append(bool(record))

        await self._transaction(change, record_key)
        return found[-1]


def _lookup(record: dict[str, Any]) -> dict[Any, Any]:
    """What a digest's lookup hash holds: enough to authorize without the record."""
    return {
        "id": record["id"],
        "name": record["name"],
        "role": record["role"],
        "namespace": record.get("namespace", ""),
    }


def _info(record: dict[str, Any]) -> KeyInfo:
    return KeyInfo(
        id=record["id"],
        name=record["name"],
        role=Role(record["role"]),
        namespace=record.get("namespace") or None,
        created_at=_required(ms_to_datetime(record["created_ms"])),
        expires_at=ms_to_datetime(record.get("expires_ms")),
        rotated_at=ms_to_datetime(record.get("rotated_ms")),
        previous_valid_until=ms_to_datetime(record.get("previous_until_ms")),
    )


def _required(value: datetime | None) -> datetime:
    if value is None:
        raise ValueError("a stored key without its creation time")
    return value
