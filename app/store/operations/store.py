"""Bulk operations' records: a bulk retry's filter and progress, and who drives it.

An operation is one Redis hash under a global key (``<prefix>:operation:<id>``,
see :mod:`app.store.keys`), kept ``LEASEHOLD_OPERATION_RETENTION_S`` after its last
step. Its driver (one API process, :mod:`app.api.operations`) saves every step with
``commit_operation``, which holds a lease on the record by the Redis clock: a
process that stops renewing loses the operation to whoever resumes it, and a late
save from a driver nobody replaced is kept. The progress fields:

``status`` running | done | cancelled; ``cursor`` where the listing goes on;
``steps``, ``looked_at``, ``matched``, ``retried``, ``skipped``, ``errors``,
``last_error``; ``recent`` (JSON: the last few (run, new run) pairs);
``created_before_ms`` (runs created at or after it are never looked at).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from app.errors import OperationConflict, OperationNotFound
from app.models.read import RetriedPair, RetryFilter, RetryOperation
from app.store.codec import dumps, ms_to_datetime, new_ulid
from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import ScriptCode, Scripts
from app.store.operations.bindings import COMMIT_OPERATION, CommitOperationArgs
from app.store.redis.connection import AsyncRedis

COUNTERS = ("steps", "looked_at", "matched", "retried", "skipped", "errors")


@dataclass
class Progress:
    """An operation's state as its driver works from it: where it is and what it did."""

    operation_id: str
    filter: RetryFilter
    limit: int
    created_before_ms: int
    cursor: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    last_error: str | None = None
    recent: list[RetriedPair] = field(default_factory=list)

    def fields(self) -> dict[str, str | int]:
        """The record fields one step saves."""
        return {
            **self.counts,
            "cursor": self.cursor or "",
            "last_error": self.last_error or "",
            "recent": dumps([pair.model_dump() for pair in self.recent]),
        }


class OperationStore:
    """Holds a Redis client; creates, reads and commits bulk operations' records."""

    def __init__(
        self,
        client: AsyncRedis,
        *,
        scripts: Scripts,
        prefix: str,
        retention_ms: int,
        empty_retention_ms: int | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.retention_ms = retention_ms
        # an operation that ends having re-run nothing is kept this long (at most as long)
        self.empty_retention_ms = min(retention_ms, empty_retention_ms or retention_ms)
        self.keys = GlobalKeys(prefix)

    async def create(self, wanted: RetryFilter, *, limit: int) -> Progress:
        """A new running operation with no driver yet (the caller starts one)."""
        operation_id = new_ulid()
        now = await self._now_ms()
        record: dict[str, str | int] = {
            "id": operation_id,
            "kind": "retry",
            "status": "running",
            "filter": wanted.model_dump_json(),
            "limit": limit,
            "created_at": now,
            "updated_at": now,
            "created_before_ms": now,
            "driver": "",
            "driver_expires_ms": 0,
        }
        progress = Progress(operation_id, wanted, limit, now)
        record.update(progress.fields())
        key = self.keys.operation(operation_id)
        pipe = self.client.pipeline(transaction=True)  # one key: one slot in a cluster too
        pipe.hset(key, mapping=cast(Any, record))
        pipe.pexpire(key, self.retention_ms)
        await pipe.execute()
        return progress

    async def _record(self, operation_id: str) -> dict[str, str]:
        fields = cast(dict[str, str], await self.client.hgetall(self.keys.operation(operation_id)))
        if not fields:
            raise OperationNotFound(operation_id)
        return fields

    async def get(self, operation_id: str) -> RetryOperation:
        """The operation as clients see it; ``stalled`` when running with no live driver.

        Raises :class:`OperationNotFound`.
        """
        fields = await self._record(operation_id)
        status = fields["status"]
        if status == "running" and int(fields.get("driver_expires_ms") or 0) <= (
            await self._now_ms()
        ):
            status = "stalled"
        created, updated = (
            ms_to_datetime(fields["created_at"]),
            ms_to_datetime(fields["updated_at"]),
        )
        assert created is not None and updated is not None
        counts = {name: int(fields.get(name) or 0) for name in COUNTERS}
        return RetryOperation(
            id=fields["id"],
            status=status,  # type: ignore[arg-type]
            filter=RetryFilter.model_validate_json(fields["filter"]),
            limit=int(fields["limit"]),
            created_at=created,
            updated_at=updated,
            finished_at=ms_to_datetime(fields.get("finished_at") or None),
            last_error=fields.get("last_error") or None,
            recent=[RetriedPair.model_validate(p) for p in json.loads(fields["recent"])],
            steps=counts["steps"],
            looked_at=counts["looked_at"],
            matched=counts["matched"],
            retried=counts["retried"],
            skipped=counts["skipped"],
            errors=counts["errors"],
        )

    async def progress(self, operation_id: str) -> Progress:
        """Where a driver taking the operation over goes on from; raises OperationNotFound."""
        fields = await self._record(operation_id)
        return Progress(
            operation_id,
            RetryFilter.model_validate_json(fields["filter"]),
            int(fields["limit"]),
            int(fields["created_before_ms"]),
            cursor=fields.get("cursor") or None,
            counts={name: int(fields.get(name) or 0) for name in COUNTERS},
            last_error=fields.get("last_error") or None,
            recent=[RetriedPair.model_validate(p) for p in json.loads(fields["recent"])],
        )

    async def commit(
        self,
        operation_id: str,
        *,
        driver: str,
        lease_ms: int,
        fields: dict[str, Any],
        force: bool = False,
        empty: bool = False,
    ) -> None:
        """Save ``fields`` as ``driver``, extending its lease by ``lease_ms``.

        ``empty``: the operation ends having re-run nothing, so its record is kept only
        ``empty_retention_ms``. Raises :class:`OperationNotFound`, or
        :class:`OperationConflict` when the operation is no longer running or another
        driver's lease is live (unless ``force``, which a cancel uses).
        """
        args = CommitOperationArgs(
            operation_id=operation_id,
            driver=driver,
            lease_ms=lease_ms,
            retention_ms=self.empty_retention_ms if empty else self.retention_ms,
            fields=dumps(fields),
            force=1 if force else 0,
        )
        # the operation's key is global: the queue part of QueueKeys is not used
        reply = await COMMIT_OPERATION.send(
            self.scripts, self.client, QueueKeys(self.prefix, ""), args
        )
        if reply.code == ScriptCode.NOT_FOUND:
            raise OperationNotFound(operation_id)
        if reply.code == ScriptCode.INVALID:
            raise OperationConflict(operation_id, f"it is {reply.detail}")
        if reply.code == ScriptCode.CONFLICT:
            raise OperationConflict(operation_id, f"it is being driven by {reply.detail}")

    async def _now_ms(self) -> int:
        """The Redis server's clock: the one every lease, this one too, is judged by."""
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000
