"""The one place tokens are signed: Ed25519 keys kept in Redis, rotated, published as a JWKS.

Both token kinds go through :class:`SigningKeys`: the API's browser stream tokens
(``POST /runs/{id}/stream-token``) and a handler's lease tokens
(``ctx.lease_token``). Keys live in one hash, ``<prefix>:signing:keys`` (kid -> JSON
record: the private key as unencrypted PKCS#8 PEM, its public JWK, when it was made by
the Redis clock). **The private keys are stored unencrypted**: whoever can read
Redis can sign tokens, as whoever can write Redis can already move any lease.

* The first process that needs a key makes one (``HSETNX`` under a fresh kid).
* The newest key signs. When it is ``LEASEHOLD_SIGNING_KEY_ROTATE_S`` old (Redis
  clock) the next process that signs makes a new one. Two processes rotating at
  once make two keys; both are published and the newest (by time, then kid) signs,
  so every process agrees.
* A replaced key stays published until every token it can have signed has expired:
  :attr:`SigningKeys.retain_ms` after its successor appeared (the longest token
  lifetime plus two refresh periods, since a process may sign with a key it read up to
  one refresh period ago). Then the next reader deletes it.

Processes keep the keys they read for :data:`REFRESH_S`; a verifier that meets an
unknown ``kid`` asks for the key set again (:meth:`SigningKeys.public_keys` with
``fresh``).
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm

from app.store.keys import GlobalKeys
from app.store.redis.connection import AsyncRedis

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

ALGORITHM = "EdDSA"
ISSUER = "leasehold"
# how long a process keeps the key set it read (a new key reaches every signer within it)
REFRESH_S = 30.0
# a verifier's ``fresh`` read happens at most this often (an unknown kid costs a forger one)
FRESH_MIN_S = 1.0


@dataclass(frozen=True)
class SigningKey:
    """One key: its id, when it was made (epoch ms, Redis clock), the key pair."""

    kid: str
    created_ms: int
    private: Ed25519PrivateKey

    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK (RFC 8037 OKP), with ``kid``, ``alg`` and ``use``."""
        jwk: dict[str, Any] = json.loads(OKPAlgorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": ALGORITHM, "use": "sig"}

    def record(self) -> str:
        """How the key is kept in Redis."""
        pem = self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return json.dumps({"kid": self.kid, "created_ms": self.created_ms, "pem": pem.decode()})

    @classmethod
    def from_record(cls, raw: str | bytes) -> SigningKey | None:
        """A stored key, or None for a record that is not one (logged, never signed with)."""
        try:
            data = json.loads(raw)
            private = serialization.load_pem_private_key(data["pem"].encode(), password=None)
            if not isinstance(private, Ed25519PrivateKey):
                raise TypeError("not an Ed25519 key")
            return cls(str(data["kid"]), int(data["created_ms"]), private)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("signing key record ignored: %s", exc)
            return None


class SigningKeys:
    """Signs claims with the newest key; publishes every key still needed."""

    def __init__(
        self, client: AsyncRedis, *, prefix: str, rotate_ms: int, max_token_ms: int
    ) -> None:
        """``max_token_ms``: the longest lifetime of a token signed here (it decides how long
        a replaced key stays published)."""
        self.client = client
        self.key = GlobalKeys(prefix).signing_keys
        self.rotate_ms = rotate_ms
        self.retain_ms = max_token_ms + round(2 * REFRESH_S * 1000)
        self._keys: list[SigningKey] = []
        self._read_at = -REFRESH_S

    @classmethod
    def for_settings(cls, client: AsyncRedis, settings: Settings) -> SigningKeys:
        """The keys of ``settings``: their prefix, rotation and the longest token lifetime."""
        longest_s = max(settings.stream_token_ttl_s, settings.lease_token_max_s)
        return cls(
            client,
            prefix=settings.prefix,
            rotate_ms=round(settings.signing_key_rotate_s * 1000),
            max_token_ms=round(longest_s * 1000),
        )

    async def now_ms(self) -> int:
        """The Redis server's clock, epoch ms: what every expiry is judged by."""
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def sign(self, claims: dict[str, Any]) -> str:
        """``claims`` as a compact JWS (EdDSA) under the newest key, ``iss`` added.

        Makes the first key, or the next one when the newest is due for rotation.
        """
        key = (await self._current(signing=True))[-1]
        payload = {"iss": ISSUER, **claims}
        return jwt.encode(payload, key.private, algorithm=ALGORITHM, headers={"kid": key.kid})

    async def public_keys(self, *, fresh: bool = False) -> dict[str, Any]:
        """The JWKS: every key that may have signed a token not yet expired.

        Writes nothing (an open route serves it): before the first token there is no key.
        ``fresh`` reads Redis even within the refresh period (a verifier met an unknown
        kid), at most once per FRESH_MIN_S.
        """
        keys = await self._current(fresh=fresh)
        return {"keys": [key.public_jwk() for key in keys]}

    async def _current(self, *, fresh: bool = False, signing: bool = False) -> list[SigningKey]:
        """The keys oldest first (the last signs), read at most once per REFRESH_S."""
        age_s = time.monotonic() - self._read_at
        due = age_s >= REFRESH_S or (fresh and age_s >= FRESH_MIN_S)
        if due or not self._keys:
            self._keys = await self._read(signing=signing)
            self._read_at = time.monotonic()
        return self._keys

    async def _read(self, *, signing: bool) -> list[SigningKey]:
        """The stored keys still needed; a signer also makes a due key and forgets stale ones."""
        now_ms = await self.now_ms()
        keys = await self._stored()
        if signing and (not keys or now_ms - keys[-1].created_ms >= self.rotate_ms):
            new = SigningKey(secrets.token_urlsafe(12), now_ms, Ed25519PrivateKey.generate())
            await self.client.hsetnx(self.key, new.kid, new.record())
            keys = await self._stored()
        stale = [
            old.kid
            for old, successor in itertools.pairwise(keys)
            if now_ms - successor.created_ms > self.retain_ms
        ]
        if stale and signing:
            await self.client.hdel(self.key, *stale)
        return [key for key in keys if key.kid not in stale]

    async def _stored(self) -> list[SigningKey]:
        raw: dict[Any, Any] = await self.client.hgetall(self.key)
        keys = [key for key in map(SigningKey.from_record, raw.values()) if key is not None]
        return sorted(keys, key=lambda key: (key.created_ms, key.kid))
