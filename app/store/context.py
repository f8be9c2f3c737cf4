"""What every store holds: one Redis client, the scripts, the key prefix and the bounds.

``RunStore``, ``LeaseStore`` and ``ProgressStore`` each used to take the same
client, scripts, prefix and stream cap in a constructor of their own (and the
executor built a ``ProgressStore`` out of a ``LeaseStore``'s fields). They now
share one :class:`StoreContext`, built once per process from the settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from app.store.keys import QueueKeys
from app.store.lua.scripts import Scripts
from app.store.redis.connection import AsyncRedis
from app.store.retention import Retention

if TYPE_CHECKING:
    from app.settings import Settings


@dataclass(frozen=True)
class StoreContext:
    """The connection and the bounds every store's transitions are sent with."""

    client: AsyncRedis
    scripts: Scripts
    prefix: str
    events_maxlen: int
    retention: Retention
    lease_ttl_ms: int
    queued_ttl_ms: int

    @classmethod
    def for_settings(cls, client: AsyncRedis, scripts: Scripts, settings: Settings) -> StoreContext:
        """The context of ``settings``: their prefix, stream cap, retention and TTLs."""
        return cls(
            client=client,
            scripts=scripts,
            prefix=settings.data_prefix,
            events_maxlen=settings.events_maxlen,
            retention=Retention.for_settings(settings),
            lease_ttl_ms=settings.lease_ttl_ms,
            queued_ttl_ms=settings.queued_ttl_ms,
        )

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)


S = TypeVar("S", bound="Store")


class Store:
    """A store on a :class:`StoreContext` (the shared part of every store's constructor)."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx
        self.client = ctx.client
        self.scripts = ctx.scripts
        self.prefix = ctx.prefix

    @classmethod
    def for_settings(cls: type[S], client: AsyncRedis, scripts: Scripts, settings: Settings) -> S:
        """A store on ``client`` with the prefix, bounds and TTLs of ``settings``."""
        return cls(StoreContext.for_settings(client, scripts, settings))

    @property
    def events_maxlen(self) -> int:
        """Approximate cap of each run's event stream."""
        return self.ctx.events_maxlen

    @property
    def retention(self) -> Retention:
        """How long ended runs are kept, per status."""
        return self.ctx.retention

    @property
    def lease_ttl_ms(self) -> int:
        """How long a claim or renewal holds a lease."""
        return self.ctx.lease_ttl_ms

    @property
    def queued_ttl_ms(self) -> int:
        """How long a run may wait unclaimed, unless it says otherwise."""
        return self.ctx.queued_ttl_ms

    def keys(self, queue: str) -> QueueKeys:
        """Key names for one queue."""
        return QueueKeys(self.prefix, queue)
