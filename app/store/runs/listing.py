"""Listing runs: the newest first across queues, filtered, paged by a cursor, bounded.

A page merges the queues' ``runs`` indexes by creation time, reads records in chunks
and stops at a scan budget (:class:`ScanBudget`): the runs it may look at and the
bytes of records it may read. A filter that matches little reads many runs per run
it returns, and a metadata filter reads each one's metadata, so without the byte
budget one request could have Redis send a whole queue's metadata (~100 MB over
2,000 runs with 50 KB each). A page that stops on the budget says so
(``truncated="scan_budget"``) and carries the cursor to go on from.

What the budget counts is known before it is read: the summaries' round trip also
asks the length (HSTRLEN) of every field a run would need next (its metadata for a
metadata filter, the fields ``include`` names), so a page never reads a run's large
fields past the budget. It is judged between runs: a call reads at most the budget
plus one chunk of summaries (``LIST_SCAN_CHUNK`` runs' positions and summaries), and
always judges at least one run, so the cursor always moves on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from app.models import Run, RunStatus
from app.models.read import RunPage
from app.store.codec import (
    LARGE_FIELDS,
    SUMMARY_FIELDS,
    dumps,
    run_from_hash,
)
from app.store.context import Store
from app.store.keys import queue_of_run
from app.store.queues.store import declared_queues
from app.store.runs.positions import Position as _Position

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

# a listed run on its way to a page: its position, the one before it, its summary
_Matched = tuple["_Position", "_Position | None", dict[str, str]]
# a record as a listing read it: the fields asked for, and the lengths of those measured
_Read = tuple[dict[str, str], int]
# where a page ended early: the position to go on after, and whether the budget ended it
_Stop = tuple["_Position", bool]


LIST_SCAN_CHUNK = 200


# runs whose large fields (input, output, metadata) one round trip of a listing reads
LIST_LOAD_CHUNK = 8


# what an index entry costs a read: its id, plus its score as text and framing, roughly
POSITION_OVERHEAD_BYTES = 24


@dataclass(frozen=True)
class ScanBudget:
    """What one listing call may read before it stops with a cursor (``truncated``).

    ``runs``: runs looked at, matched or not; ``bytes``: index entries and the field
    values of the records read (summaries, metadata a filter reads, included fields).
    """

    runs: int = 5000
    bytes: int = 4 * 1024 * 1024

    @classmethod
    def for_settings(cls, settings: Settings) -> ScanBudget:
        """LEASEHOLD_LIST_SCAN_BUDGET_RUNS and LEASEHOLD_LIST_SCAN_BUDGET_BYTES."""
        return cls(runs=settings.list_scan_budget_runs, bytes=settings.list_scan_budget_bytes)


@dataclass
class _Scan:
    """What one listing call has looked at and read so far, against its budget."""

    budget: ScanBudget
    runs: int = 0
    bytes: int = 0

    @property
    def spent(self) -> bool:
        return self.runs >= self.budget.runs or self.bytes >= self.budget.bytes

    def affords(self, more_bytes: int) -> bool:
        """Whether ``more_bytes`` more stay within the budget (always, for a call's first run:
        a call that judged nothing would hand back the cursor it was given)."""
        return self.runs == 0 or self.bytes + more_bytes <= self.budget.bytes


def _text_bytes(value: str) -> int:
    """UTF-8 size of a value Redis sent; an ASCII one (most) without encoding it."""
    return len(value) if value.isascii() else len(value.encode())


# JSON keys, quotes and dates a listed run adds to its stored bytes, roughly
LIST_ITEM_OVERHEAD_BYTES = 512


def _stored_bytes(fields: dict[str, str]) -> int:
    """What a listed run costs a response: its stored field values (JSON adds little)."""
    return sum(len(value) for value in fields.values()) + LIST_ITEM_OVERHEAD_BYTES


@dataclass
class _Page:
    """The items of one page so far, against its count limit and byte budget."""

    limit: int
    max_bytes: int | None
    items: list[Run] = field(default_factory=list)
    size: int = 0

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit

    def add(self, run: Run, size: int) -> bool:
        """Take the run unless it would pass the byte budget (a first item always fits)."""
        if self.items and self.max_bytes is not None and self.size + size > self.max_bytes:
            return False
        self.items.append(run)
        self.size += size
        return True


@dataclass(frozen=True)
class _Filter:
    """What a listing keeps: a status, a handler, metadata key=value pairs, a parent, a
    root (all must hold)."""

    status: RunStatus | None
    handler: str | None
    metadata: Mapping[str, str]
    parent_id: str | None = None
    root_id: str | None = None

    def matches(self, run: Run) -> bool:
        """Whether a summary passes the status, handler, parent and root filters (metadata:
        see below)."""
        return (
            (self.status is None or run.status == self.status)
            and (self.handler is None or run.handler == self.handler)
            and (self.parent_id is None or run.parent_id == self.parent_id)
            and (self.root_id is None or run.root_id == self.root_id)
        )


def _metadata_holds(metadata: dict[str, Any], pairs: Mapping[str, str]) -> bool:
    """Every pair against the metadata: a string value equals the text, the rest its JSON."""
    for key, value in pairs.items():
        if key not in metadata:
            return False
        held = metadata[key]
        if (held != value) if isinstance(held, str) else (dumps(held) != value):
            return False
    return True


def _judged(
    batch: list[_Position],
    summaries: list[_Read | None],
    after: _Position | None,
    wanted: _Filter,
    scan: _Scan,
) -> tuple[list[_Matched], _Position | None]:
    """The runs the summary filters keep, in order, until one whose later reads (its
    measured fields) would pass the budget: those, and the position to go on after then
    (None: the whole batch was judged). Each run judged counts in ``scan.runs``."""
    matched: list[_Matched] = []
    previous, pending = after, 0
    for position, summary in zip(batch, summaries, strict=True):
        if summary is not None and wanted.matches(run_from_hash(summary[0])):
            if not scan.affords(pending + summary[1]):
                assert previous is not None, "a call's first run is always affordable"
                return matched, previous
            pending += summary[1]
            matched.append((position, previous, summary[0]))
        scan.runs += 1
        previous = position
    return matched, None


class RunListing(Store):
    """Lists runs (``list_runs``) and prunes index entries whose record is gone."""

    async def queues(self) -> list[str]:
        """Every declared queue (:func:`app.store.queues.store.declared_queues`)."""
        return await declared_queues(self.client, self.prefix)

    async def list_runs(
        self,
        *,
        queue: str | None = None,
        status: RunStatus | None = None,
        handler: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        include: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
        among: Sequence[str] | None = None,
        created_before_ms: int | None = None,
        metadata: Mapping[str, str] | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
        budget: ScanBudget | None = None,
    ) -> RunPage:
        """Runs newest first, filtered, one page at a time, as summaries.

        Items carry no ``input``, ``output`` or ``metadata`` unless ``include`` names
        them (a subset of ``LARGE_FIELDS``): summaries are read with HMGET of
        ``SUMMARY_FIELDS`` only, and the large fields are read afterwards, for the
        runs that passed the filters, ``LIST_LOAD_CHUNK`` at a time. A page ends
        early once its items reach ``max_bytes`` (stored bytes; a first item that is
        larger alone is still returned, so a page always moves on).

        The cursor is a position in (created_at, id) order, so it stays valid while
        runs are created. Without ``queue`` it lists the queues ``among`` names (by
        default every declared queue). A page may hold fewer than ``limit`` items when filters skip
        many runs or the byte budget ends it; ``next_cursor`` is None only when
        nothing older remains. A call stops at ``budget`` (by default
        :class:`ScanBudget`'s): its page, maybe empty, says ``truncated="scan_budget"``
        and its cursor goes on after the last run it judged, so following cursors
        still finds every match once. Raises :class:`InvalidCursor` for a cursor this store
        did not produce. ``created_before_ms`` skips every run created at or after it.
        ``metadata`` keeps runs whose metadata has each key equal to its value (a
        string equals itself, anything else its compact JSON: ``3``, ``true``); it
        reads each scanned run's metadata too, so it costs what the scan reads.
        ``parent_id`` / ``root_id`` keep a run's children / the runs of its tree (scan
        filters: a parent's children, oldest first, are cheaper from
        :meth:`app.store.family.tree.TreeStore.children_page`).
        """
        after = _Position.decode(cursor) if cursor else None
        if created_before_ms is not None:
            # start below the bound: nothing newer is read at all
            bound = _Position(created_before_ms, "")
            after = bound if after is None else min(after, bound)
        queues = [queue] if queue else list(among) if among is not None else await self.queues()
        page = _Page(limit=limit, max_bytes=max_bytes)
        scan = _Scan(budget or ScanBudget())
        wanted = _Filter(status, handler, metadata or {}, parent_id, root_id)
        while not scan.spent:
            batch = await self._next_positions(queues, after, scan)
            if not batch:
                return RunPage(items=page.items, next_cursor=None)
            batch = batch[: scan.budget.runs - scan.runs]
            stop = await self._fill(page, batch, after, wanted, include, scan)
            if stop is not None:
                position, on_budget = stop
                return RunPage(
                    items=page.items,
                    next_cursor=position.encode(),
                    truncated="scan_budget" if on_budget else None,
                )
            after = batch[-1]
        assert after is not None, "a call judges at least one run before its budget is spent"
        return RunPage(items=page.items, next_cursor=after.encode(), truncated="scan_budget")

    async def _fill(
        self,
        page: _Page,
        batch: list[_Position],
        after: _Position | None,
        wanted: _Filter,
        include: frozenset[str],
        scan: _Scan,
    ) -> _Stop | None:
        """Judge a batch in order into ``page``; where to go on from if the page filled
        (False) or the scan budget ended it before the batch's end (True)."""
        large = tuple(field for field in LARGE_FIELDS if field in include)
        # the fields a kept run reads next: their lengths come with its summary
        later = tuple(dict.fromkeys((*(("metadata",) if wanted.metadata else ()), *large)))
        summaries = await self._read(batch, SUMMARY_FIELDS, scan, measure=later)
        matched, cut = _judged(batch, summaries, after, wanted, scan)
        if wanted.metadata:
            keep = "metadata" in large  # read once: the filter's copy is the one returned
            matched = await self._with_metadata(matched, wanted.metadata, scan, keep=keep)
            large = tuple(field for field in large if field != "metadata")
        filled = await self._add(page, matched, large, scan)
        if filled is not None:
            return filled, False
        return None if cut is None else (cut, True)

    async def _add(
        self, page: _Page, matched: list[_Matched], large: tuple[str, ...], scan: _Scan
    ) -> _Position | None:
        """Add the matched runs to ``page`` (reading ``large`` for them, ``LIST_LOAD_CHUNK``
        at a time); the position to resume after if it filled."""
        step = LIST_LOAD_CHUNK if large else max(1, len(matched))
        for start in range(0, len(matched), step):
            chunk = matched[start : start + step]
            extras = await self._read([p for p, _, _ in chunk], large, scan) if large else []
            for index, (position, previous, fields) in enumerate(chunk):
                extra = extras[index] if large else None
                record = {**fields, **(extra[0] if extra else {})} if large else fields
                if not page.add(run_from_hash(record), _stored_bytes(record)):
                    assert previous is not None, "an empty page takes any first item"
                    return previous
                if page.full:
                    return position
        return None

    async def _with_metadata(
        self, matched: list[_Matched], pairs: Mapping[str, str], scan: _Scan, *, keep: bool
    ) -> list[_Matched]:
        """The runs whose metadata holds every pair, reading it ``LIST_LOAD_CHUNK`` at a time.

        Metadata may be large: read only for runs the summary filters kept, a few
        per round trip, and dropped once judged unless ``keep`` (``include`` asks for
        it: the kept runs carry it on), so filtering by it never holds a whole
        scan's metadata (the scan budget bounds what ``keep`` holds).
        """
        kept: list[_Matched] = []
        for start in range(0, len(matched), LIST_LOAD_CHUNK):
            chunk = matched[start : start + LIST_LOAD_CHUNK]
            extras = await self._read([position for position, _, _ in chunk], ("metadata",), scan)
            for (position, previous, fields), extra in zip(chunk, extras, strict=True):
                record = {**fields, **extra[0]} if extra else None
                metadata = run_from_hash(record).metadata if record else None
                if record and metadata is not None and _metadata_holds(metadata, pairs):
                    kept.append((position, previous, record if keep else fields))
        return kept

    async def _read(
        self,
        batch: list[_Position],
        fields: tuple[str, ...],
        scan: _Scan,
        *,
        measure: tuple[str, ...] = (),
    ) -> list[_Read | None]:
        """HMGET ``fields`` of each listed run, and the length of each of ``measure``, in one
        round trip; None (and pruned) if gone. What Redis sent is counted in ``scan``."""
        pipe = self.client.pipeline(transaction=False)
        for position in batch:
            key = self.keys(queue_of_run(position.run_id)).run(position.run_id)
            pipe.hmget(key, ["id", *fields])
            for name in measure:
                pipe.hstrlen(key, name)
        replies: list[Any] = await pipe.execute()
        records: list[_Read | None] = []
        width = 1 + len(measure)
        for at, position in enumerate(batch):
            values: list[str | None] = replies[at * width]
            scan.bytes += sum(_text_bytes(value) for value in values if value is not None)
            if values[0] is None:
                # the record expired after its retention: drop it from the listing index
                await self.client.zrem(
                    self.keys(queue_of_run(position.run_id)).runs, position.run_id
                )
                records.append(None)
                continue
            named = zip(fields, values[1:], strict=True)
            found = {name: value for name, value in named if value is not None}
            records.append((found, sum(replies[at * width + 1 : (at + 1) * width])))
        return records

    async def _next_positions(
        self, queues: list[str], after: _Position | None, scan: _Scan
    ) -> list[_Position]:
        """The next chunk of positions older than ``after``, merged across queues."""
        merged: list[_Position] = []
        boundary: _Position | None = None
        for name in queues:
            chunk = await self._queue_positions(name, after, scan)
            merged.extend(chunk)
            if len(chunk) == LIST_SCAN_CHUNK:
                # this queue has more beyond its last fetched item: nothing older is safe
                boundary = chunk[-1] if boundary is None else max(boundary, chunk[-1])
        merged.sort(reverse=True)
        if boundary is not None:
            merged = [position for position in merged if position >= boundary]
        return merged

    async def _queue_positions(
        self, queue: str, after: _Position | None, scan: _Scan
    ) -> list[_Position]:
        """Up to ``LIST_SCAN_CHUNK`` positions of ``queue`` older than ``after``, newest first.

        Fewer only when no more exist (:meth:`_next_positions` relies on it). Redis bounds
        the read by score alone, and the runs one script call creates share one (a
        schedule's catch-up tick: up to LEASEHOLD_SCHEDULE_FIRES_PER_TICK_MAX, 10,000, in
        one call): the entries of ``after``'s score at or above it are read and skipped, a
        window at a time, however many.
        """
        window = LIST_SCAN_CHUNK + (LIST_SCAN_CHUNK if after else 0)
        top = str(after.score) if after else "+inf"
        positions: list[_Position] = []
        read = 0
        while len(positions) < LIST_SCAN_CHUNK:
            raw = cast(
                list[tuple[str, float]],
                await self.client.zrevrangebyscore(
                    self.keys(queue).runs, top, "-inf", start=read, num=window, withscores=True
                ),
            )
            scan.bytes += sum(len(run_id) + POSITION_OVERHEAD_BYTES for run_id, _ in raw)
            fetched = (_Position(int(score), run_id) for run_id, score in raw)
            positions.extend(p for p in fetched if after is None or p < after)
            if len(raw) < window:
                break
            read += len(raw)
        return positions[:LIST_SCAN_CHUNK]

    async def sweep_index(self, queue: str, start: int, count: int) -> int:
        """Drop listing-index entries of runs that are gone, ``count`` of them from ``start``.

        A finished run's keys expire after its retention, but its entry in the
        queue's listing index (``<tag>:runs``) is not a key of its own: listing prunes
        the entries it reads, and this sweep (the reconciler's, oldest first, one
        bounded chunk per pass) reaches the ones nobody pages to, so the index
        does not outgrow the runs. Returns the position of the next sweep: 0 once
        the end is reached. Safe anywhere: a record and its entry are created in
        one script, so an entry without a record belongs to a run that is gone.
        """
        keys = self.keys(queue)
        ids = cast(list[str], await self.client.zrange(keys.runs, start, start + count - 1))
        if not ids:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for run_id in ids:
            pipe.exists(keys.run(run_id))
        present: list[int] = await pipe.execute()
        gone = [run_id for run_id, exists in zip(ids, present, strict=True) if not exists]
        if gone:
            await self.client.zrem(keys.runs, *gone)
        return 0 if len(ids) < count else start + len(ids) - len(gone)
