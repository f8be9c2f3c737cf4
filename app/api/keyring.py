"""Who a presented bearer key is: the bootstrap keys, or a stored key looked up and cached.

The bootstrap keys (``LEASEHOLD_API_KEYS``) are ``admin`` and are compared in constant
time by :mod:`app.keys`, as before. Any other key is looked up in Redis by the SHA-256
of the secret (:class:`app.store.apikeys.store.KeyStore`), and the answer — a key, or
none — is cached in this process for ``LEASEHOLD_KEY_CACHE_TTL_S``: at steady state a
request costs no Redis round trip for its key, and a revoked or expired key keeps
working at most that long in a process that looked it up just before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from cachetools import TTLCache

from app.models.keys import Role
from app.store.apikeys.store import KeyStore, StoredKey, secret_digest

_MISSING = object()
BOOTSTRAP = StoredKey(key_id="bootstrap", name="bootstrap", role=Role.ADMIN)


class Keyring:
    """The stored keys of one API process, behind a small TTL cache (found and not found)."""

    def __init__(
        self,
        store: KeyStore,
        *,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        # digest -> what it resolved to; past max_entries the least recently used go
        self._cache: TTLCache[str, StoredKey | None] | None = (
            TTLCache(max_entries, ttl_s, timer=clock) if ttl_s > 0 else None
        )

    async def resolve(self, secret: bytes) -> StoredKey | None:
        """The stored key this secret belongs to, or None; raises RedisError on a miss
        while Redis is unreachable."""
        digest = secret_digest(secret)
        if self._cache is not None:
            # one read: ``in`` then ``[]`` can straddle the entry's expiry (KeyError)
            cached = self._cache.get(digest, _MISSING)
            if cached is not _MISSING:
                return cast(StoredKey | None, cached)
        found = await self.store.lookup(digest)
        if self._cache is not None:
            self._cache[digest] = found
        return found

    def forget(self) -> None:
        """Drop every cached answer (this process revoked or rotated a key)."""
        if self._cache is not None:
            self._cache.clear()
