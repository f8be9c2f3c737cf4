"""The API process's cache of stored-key lookups: found and not found, bounded, timed."""

from __future__ import annotations

from typing import Any, cast

from app.api.keyring import Keyring
from app.models.keys import Role
from app.store.apikeys.store import KeyStore, StoredKey, secret_digest

KNOWN = b"lh_known-secret"
HOLDER = StoredKey("k0123456789abcdef", "ci", Role.READ)


class CountingStore:
    """A KeyStore stand-in that knows one secret and counts its lookups."""

    def __init__(self) -> None:
        self.lookups = 0

    async def lookup(self, digest_hex: str) -> StoredKey | None:
        self.lookups += 1
        return HOLDER if digest_hex == secret_digest(KNOWN) else None


def keyring(store: CountingStore, now: list[float], **options: Any) -> Keyring:
    settings = {"ttl_s": 2.0, "max_entries": 100, **options}
    return Keyring(cast(KeyStore, store), clock=lambda: now[0], **settings)


async def test_a_lookup_is_cached_for_its_ttl_then_asked_again() -> None:
    store, now = CountingStore(), [0.0]
    ring = keyring(store, now)
    assert await ring.resolve(KNOWN) == HOLDER
    now[0] = 1.9
    assert await ring.resolve(KNOWN) == HOLDER
    assert store.lookups == 1, "steady state: no Redis round trip"
    now[0] = 2.1
    await ring.resolve(KNOWN)
    assert store.lookups == 2


async def test_unknown_keys_are_cached_too_so_guessing_costs_redis_nothing() -> None:
    store, now = CountingStore(), [0.0]
    ring = keyring(store, now)
    for _ in range(5):
        assert await ring.resolve(b"lh_guess") is None
    assert store.lookups == 1


async def test_the_cache_is_bounded_and_forgets_its_oldest() -> None:
    store, now = CountingStore(), [0.0]
    ring = keyring(store, now, max_entries=3)
    await ring.resolve(KNOWN)
    for guess in (b"a", b"b", b"c"):
        await ring.resolve(guess)
    assert len(ring._cache) == 3
    await ring.resolve(KNOWN)  # the oldest entry went: asked again
    assert store.lookups == 5


async def test_ttl_zero_asks_every_time_and_forget_drops_everything() -> None:
    store, now = CountingStore(), [0.0]
    uncached = keyring(store, now, ttl_s=0.0)
    await uncached.resolve(KNOWN)
    await uncached.resolve(KNOWN)
    assert store.lookups == 2
    cached = keyring(store, now)
    await cached.resolve(KNOWN)
    cached.forget()
    await cached.resolve(KNOWN)
    assert store.lookups == 4


async def test_an_entry_expiring_between_two_reads_of_the_cache_is_a_miss_not_an_error() -> None:
    """Found under load (noisy-neighbour bench, a 500): ``in`` then ``[]`` straddled the
    entry's expiry. Here every clock read is three quarters of a TTL after the one before."""
    store, ticks = CountingStore(), iter(range(0, 10_000, 3))
    ring = Keyring(cast(KeyStore, store), ttl_s=4.0, max_entries=100, clock=lambda: next(ticks))
    for _ in range(5):
        assert await ring.resolve(KNOWN) == HOLDER
