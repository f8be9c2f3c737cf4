"""Converts between Redis representations (hash fields, stream entries, epoch ms)
and the shared models. Pure functions: no I/O."""

from __future__ import annotations

import functools
import json
import os
import time
from datetime import UTC, datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from app.models import Run, RunError, RunEvent, RunStatus

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# every 10-bit value as its two Crockford digits, and where each pair sits in a ULID
_CROCKFORD_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
_PAIR_SHIFTS = tuple(range(120, -1, -10))


def new_ulid(now_ms: int | None = None) -> str:
    """A 26-character ULID: 48 bits of ms time then 80 random bits, sortable by time.

    The 130-bit value (its top two bits zero) is written as 13 pairs of Crockford
    digits, 10 bits at a time, from a table of all 1,024 pairs: a run id is made
    per create (20,000 per second through a batch), and this is ~4x faster than
    the base32 codec (a Python function in CPython 3.11) it replaces. The time's
    5 pairs and the random part's top 6 are remembered: the ids one process makes
    in a millisecond share both (the random part counts up by one), so most ids
    encode 2 pairs, not 13 (a batch of 1,000 spent ~12 % of its create CPU here).
    """
    if now_ms is None:
        stamp, random_bits = _monotonic(int(time.time() * 1000))
    else:
        stamp, random_bits = now_ms, int.from_bytes(os.urandom(10), "big")
    pairs = _CROCKFORD_PAIRS
    return (
        _pairs_of(stamp, 5)
        + _pairs_of(random_bits >> 20, 6)
        + pairs[(random_bits >> 10) & 0x3FF]
        + pairs[random_bits & 0x3FF]
    )


def new_ulids(count: int, prefix: str = "") -> list[str]:
    """``count`` new ULIDs (each after ``prefix``), in order: what ``count`` calls of
    :func:`new_ulid` within one millisecond make, with the clock read once.

    A batch's run ids: one after the other, each the last one's random part + 1
    (like ids made one by one in one millisecond), so they start in creation order;
    ~3x cheaper per id than a call each (natively; under callgrind, where every
    call falls in a new millisecond, much more).
    """
    stamp, first_bits = _monotonic(int(time.time() * 1000), count)
    return _encoded(stamp, first_bits, count, prefix)


def _encoded(stamp: int, first_bits: int, count: int, prefix: str) -> list[str]:
    """The ULIDs of ``stamp`` with random parts ``first_bits`` .. + ``count`` - 1."""
    pairs = _CROCKFORD_PAIRS
    head_of = f"{prefix}{_pairs_of(stamp, 5)}"
    ids = []
    high = -1
    head = ""
    for bits in range(first_bits, first_bits + count):
        if bits >> 20 != high:  # once per 2^20 ids
            high = bits >> 20
            head = head_of + _pairs_of(high, 6)
        ids.append(head + pairs[(bits >> 10) & 0x3FF] + pairs[bits & 0x3FF])
    return ids


@functools.lru_cache(maxsize=8)
def _pairs_of(value: int, count: int) -> str:
    """The low ``count`` x 10 bits of ``value`` as Crockford pairs, high first."""
    pairs = _CROCKFORD_PAIRS
    return "".join([pairs[(value >> shift) & 0x3FF] for shift in _PAIR_SHIFTS[-count:]])


_last_ulid = [0, 0]  # this process's latest (ms, random bits)


def _monotonic(stamp: int, count: int = 1) -> tuple[int, int]:
    """(ms, first random bits) of ``count`` new ULIDs, each after this process's last one.

    Why: a queue's lanes order runs of the same score (the same Redis millisecond)
    by id, so the runs one process creates in one millisecond must start in the
    order they were created (the monotonic ULID variant: the random part + 1).
    The ``count`` ids take the random parts from the one returned on, in one ms.
    """
    last_stamp, last_bits = _last_ulid
    if stamp <= last_stamp and last_bits + count < 1 << 80:
        stamp, bits = last_stamp, last_bits + 1
    else:
        stamp = stamp if stamp > last_stamp else last_stamp + 1
        bits = int.from_bytes(os.urandom(10), "big")
        while bits + count > 1 << 80:  # too near the top for the span (never for one id)
            bits = int.from_bytes(os.urandom(10), "big")
    _last_ulid[:] = [stamp, bits + count - 1]
    return stamp, bits


def new_run_id(queue: str) -> str:
    """A run id that names its queue, so a lookup by id needs no directory."""
    return f"{queue}.{new_ulid()}"


def new_run_ids(queue: str, count: int) -> list[str]:
    """``count`` run ids of ``queue`` in creation order (:func:`new_ulids`): a batch's."""
    return new_ulids(count, f"{queue}.")


def ms_to_datetime(value: str | int | None) -> datetime | None:
    """Epoch ms (as Redis returns it) to an aware UTC datetime; '' or None to None."""
    if value is None or value == "":
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


# one encoder for every dumps: json.dumps with options builds a new JSONEncoder per call
# (~4 us, most of a small value's encoding; a create encodes ~9 values)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON, the form every JSON field is stored in."""
    return _COMPACT.encode(value)


# dumps' own C encoder (JSONEncoder.iterencode builds one per call, with a closure and a
# dict for cycles: most of a small value's encoding) without the cycle check, made once
_PARSED_ENCODER = c_make_encoder(
    None,  # no cycle check: a value a JSON parser made has none
    _COMPACT.default,
    encode_basestring,
    None,
    _COMPACT.key_separator,
    _COMPACT.item_separator,
    _COMPACT.sort_keys,
    _COMPACT.skipkeys,
    _COMPACT.allow_nan,
)


def dumps_parsed(value: Any) -> str:
    """:func:`dumps` of a value a JSON parser made: the same text, ~3x faster for a small one.

    The API encodes every created run's input (20,000 a second through a batch). Only
    for parsed JSON: it does not look for reference cycles, which such a value cannot
    hold (a cycle would recurse until RecursionError).
    """
    if type(value) is str:  # the encoder takes containers and scalars; dumps special-cases str
        return encode_basestring(value)
    return "".join(_PARSED_ENCODER(value, 0))


@functools.lru_cache(maxsize=4096, typed=True)
def scalar_json(value: str | int | None) -> str:
    """``dumps`` of a string, integer or None, remembered (``typed``: ``1`` is not ``True``).

    A create's fingerprint encodes its handler, queue, attempts and lease policy, the
    same few values run after run: from the cache that is a lookup, not an encode.
    """
    return _COMPACT.encode(value)


def _loads(value: str | None) -> Any:
    if value is None or value == "":
        return None
    return json.loads(value)


# run-record fields a listing reads for every run: everything but the large ones
# (input, output, metadata; and the record's internals: checkpoint state, effects,
# escalation, resume input), so listing costs what it returns
SUMMARY_FIELDS = (
    "id",
    "queue",
    "handler",
    "status",
    "error",
    "attempt",
    "max_attempts",
    "on_lease_expired",
    "owner_id",
    "build_id",
    "fence",
    "lease_expires_at",
    "lease_ttl_ms",
    "waiting_for",
    "created_at",
    "started_at",
    "first_started_at",
    "finished_at",
    "cancel_requested_at",
    "idempotency_key",
    "last_event_id",
    "retention_ms",
    "run_at",
    "retry_of",
    "retried_by",
    "ckey",
    "skey",
    "priority",
    "blocked_on",
    "schedule_id",
    "fire_ms",
    "parent_id",
    "root_id",
    "depth",
)
# the large fields a listing returns only when asked (GET /runs?include=...)
LARGE_FIELDS = ("input", "output", "metadata")


def run_from_hash(fields: dict[str, str]) -> Run:
    """Build a :class:`Run` from the run record's hash fields."""
    error = _loads(fields.get("error"))
    created = ms_to_datetime(fields.get("created_at"))
    assert created is not None, "a run record always has created_at"
    return Run(
        id=fields["id"],
        queue=fields["queue"],
        handler=fields["handler"],
        status=RunStatus(fields["status"]),
        input=_loads(fields.get("input")),
        output=_loads(fields.get("output")),
        error=RunError.model_validate(error) if error else None,
        attempt=int(fields.get("attempt", 1)),
        max_attempts=int(fields.get("max_attempts", 1)),
        on_lease_expired=fields.get("on_lease_expired", "orphan"),  # type: ignore[arg-type]
        owner_id=fields.get("owner_id") or None,
        build_id=fields.get("build_id") or None,
        versioning="pinned" if fields.get("versioning") == "pinned" else "auto_upgrade",
        pinned_build=fields.get("pin") or None,
        fence=int(fields.get("fence", 0)),
        lease_expires_at=ms_to_datetime(fields.get("lease_expires_at")),
        lease_ttl_ms=int(fields["lease_ttl_ms"]) if fields.get("lease_ttl_ms") else None,
        created_at=created,
        started_at=ms_to_datetime(fields.get("started_at")),
        first_started_at=ms_to_datetime(fields.get("first_started_at")),
        finished_at=ms_to_datetime(fields.get("finished_at")),
        cancel_requested_at=ms_to_datetime(fields.get("cancel_requested_at")),
        idempotency_key=fields.get("idempotency_key") or None,
        metadata=_loads(fields.get("metadata")) or {},
        last_event_id=fields.get("last_event_id") or None,
        retention_s=int(fields["retention_ms"]) / 1000 if fields.get("retention_ms") else None,
        run_at=ms_to_datetime(fields.get("run_at")),
        retry_of=fields.get("retry_of") or None,
        retried_by=fields.get("retried_by") or None,
        schedule_id=fields.get("schedule_id") or None,
        fire_at=ms_to_datetime(fields.get("fire_ms")),
        # only while it waits: after a resume the record keeps it, but it no longer applies
        escalation=_loads(fields.get("escalation"))
        if fields["status"] == RunStatus.WAITING_HUMAN.value
        else None,
        waiting_for=_waiting_for(fields),
        concurrency_key=fields.get("ckey") or None,
        singleton_key=fields.get("skey") or None,
        priority=int(fields.get("priority") or 0),
        # only while in a lane (queued, or a durable sleep whose time came): a claim
        # clears it, but a record read mid-flight may not be
        blocked_on=(fields.get("blocked_on") or None) if fields["status"] in _IN_LANE else None,
        parent_id=fields.get("parent_id") or None,
        root_id=fields.get("root_id") or None,
        depth=int(fields.get("depth") or 0),
    )


_IN_LANE = frozenset({RunStatus.QUEUED.value, RunStatus.WAITING.value})


def _waiting_for(fields: dict[str, str]) -> dict[str, Any] | None:
    """What a parked run waits for: a durable wait's, or a person's (ctx.ask_human) only.

    A record keeps its last durable wait after it ended (a claim does not clear it): a
    run the watchdog escalated to a person is not waiting for that old sleep.
    """
    wait: dict[str, Any] | None = _loads(fields.get("waiting_for"))
    if fields["status"] == RunStatus.WAITING.value:
        return wait
    if fields["status"] == RunStatus.WAITING_HUMAN.value and (wait or {}).get("kind") == "human":
        return wait
    return None


def event_from_entry(run_id: str, entry_id: str, fields: dict[str, str]) -> RunEvent:
    """Build a :class:`RunEvent` from one stream entry."""
    ts = ms_to_datetime(fields.get("ts"))
    return RunEvent(
        id=entry_id,
        run_id=run_id,
        type=fields["type"],
        ts=ts if ts is not None else datetime.now(tz=UTC),
        fence=int(fields.get("fence", 0)),
        data=_loads(fields.get("data")) or {},
    )
