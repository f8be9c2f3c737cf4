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

from app.models.keys import Role
from app.store.apikeys.store import KeyStore, StoredKey, secret_digest

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
        self._clock = clock
        # digest -> (monotonic deadline, what it resolved to); insertion order = age
        self._cache: dict[str, tuple[float, StoredKey | None]] = {}

    async def resolve(self, secret: bytes) -> StoredKey | None:
        """The stored key this secret belongs to, or None; raises RedisError on a miss
        while Redis is unreachable."""
        digest = secret_digest(secret)
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        found = await self.store.lookup(digest)
        if self.ttl_s > 0:
            self._cache.pop(digest, None)
            while len(self._cache) >= self.max_entries:
                del self._cache[next(iter(self._cache))]
            self._cache[digest] = (now + self.ttl_s, found)
        return found

    def forget(self) -> None:
        """Drop every cached answer (this process revoked or rotated a key)."""
        self._cache.clear()
