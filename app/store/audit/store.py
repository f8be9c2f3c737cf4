"""Append to and read the audit stream (``<prefix>:audit``, :mod:`app.store.keys`).

An entry's time is its stream id, given by the Redis server's clock. The stream is
bounded twice: ``MAXLEN ~ LEASEHOLD_AUDIT_MAX_ENTRIES`` on every append, and entries
older than ``LEASEHOLD_AUDIT_RETENTION_S`` are trimmed (``XTRIM MINID ~``) in the same
round trip; the cut-off is this process's clock, close enough for a retention of days.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from app.models.keys import AuditEntry, AuditPage, Role
from app.store.keys import GlobalKeys
from app.store.redis.connection import AsyncRedis


@dataclass(frozen=True)
class AuditRecord:
    """One call to append: who, with which role, what, its status, from where."""

    key_id: str
    key_name: str
    role: Role
    namespace: str
    method: str
    path: str
    status: int
    client: str


class AuditStore:
    """The audit stream of one prefix."""

    def __init__(
        self, client: AsyncRedis, *, prefix: str, max_entries: int, retention_s: float
    ) -> None:
        self.client = client
        self.key = GlobalKeys(prefix).audit
        self.max_entries = max_entries
        self.retention_s = retention_s

    async def append(self, record: AuditRecord) -> None:
        """Record one call; raises RedisError (the caller logs it: the call already ran)."""
        fields: dict[Any, Any] = {
            "key_id": record.key_id,
            "key_name": record.key_name,
            "role": record.role.value,
            "namespace": record.namespace,
            "method": record.method,
            "path": record.path[:2048],
            "status": record.status,
            "client": record.client,
        }
        oldest_ms = int((time.time() - self.retention_s) * 1000)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xadd(self.key, fields, maxlen=self.max_entries, approximate=True)
            pipe.xtrim(self.key, minid=f"{max(oldest_ms, 0)}-0", approximate=True)
            await pipe.execute()

    async def page(self, *, limit: int, before: str | None) -> AuditPage:
        """Up to ``limit`` entries, newest first, older than stream id ``before``."""
        newest = "+"
        if before is not None:
            ms, seq = (int(part) for part in before.split("-", 1))
            if ms == seq == 0:
                return AuditPage(items=[])  # nothing is older than 0-0 ("(0-0" is an error)
            newest = f"({ms}-{seq}"
        rows = cast(
            list[tuple[str, dict[str, str]]],
            await self.client.xrevrange(self.key, max=newest, min="-", count=limit + 1),
        )
        items = [_entry(entry_id, fields) for entry_id, fields in rows[:limit]]
        cursor = items[-1].id if len(rows) > limit else None
        return AuditPage(items=items, next_cursor=cursor)


def _entry(entry_id: str, fields: dict[str, str]) -> AuditEntry:
    return AuditEntry(
        id=entry_id,
        at=datetime.fromtimestamp(int(entry_id.split("-", 1)[0]) / 1000, tz=UTC),
        key_id=fields["key_id"],
        key_name=fields["key_name"],
        role=Role(fields["role"]),
        # entries from before namespaces addressed the default one
        namespace=fields.get("namespace", "default"),
        method=fields["method"],
        path=fields["path"],
        status=int(fields["status"]),
        client=fields["client"],
    )
