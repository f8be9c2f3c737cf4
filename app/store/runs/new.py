"""A run to create (``NewRun``), as a create, a batch, a re-run or a spawn names it, and
its fingerprint: what tells an idempotent replay from a conflicting reuse of its key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from app.store.codec import (
    dumps,
    scalar_json,
)
from app.store.ratelimits.store import StartGate


@dataclass(slots=True)
class NewRun:
    """What a client asks for; validated by the API before it gets here.

    Not frozen: a frozen dataclass sets each of its 27 fields through
    ``object.__setattr__``, ~4 of the API's ~60 us per run of a batch; nothing
    changes one after it is made (``dataclasses.replace`` makes another).
    """

    handler: str
    input: Any
    queue: str = "default"
    max_attempts: int = 1
    on_lease_expired: str = "orphan"
    idempotency_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] | None = None
    retention_ms: int | None = None  # None: the per-status retention of the store
    queued_ttl_ms: int | None = None  # None: the store's default
    # W3C trace context (validated by the API) the attempts' spans are children of; not part
    # of the fingerprint: the same body under another trace is still a replay
    traceparent: str | None = None
    # a delayed start: an absolute epoch ms (run_at) or ms after the create by the Redis
    # clock (delay_s); at most one is set, and None for both starts at once
    start_at_ms: int | None = None
    delay_ms: int | None = None
    # start gates (store/ratelimits.py StartGate): the buckets the run's start waits on
    rate_limits: tuple[StartGate, ...] = ()
    # flow control (issue 15): the key whose limit it counts against, the singleton key
    # and what a create does when a run of it is active or queued, the priority and its
    # aging boost (priority x LEASEHOLD_PRIORITY_AGING_STEP_S, in ms)
    concurrency_key: str | None = None
    singleton_key: str | None = None
    on_conflict: str = "enqueue"
    priority: int = 0
    boost_ms: int = 0
    # runs that start runs (issue 17): the spawning run, the top of the tree ('' : this
    # run), how deep it sits; the id a spawn chose before the create (None: a new one)
    parent_id: str | None = None
    root_id: str | None = None
    depth: int = 0
    run_id: str | None = None
    # deploys (issue 36): "pinned" keeps the run on the build that first claims it;
    # None (auto_upgrade) lets any build take it at each claim
    versioning: str | None = None

    # the input already encoded by whoever checked its size; None: encoded when needed
    encoded_input: str | None = field(default=None, compare=False, repr=False)

    def start_ms(self, created_ms: int) -> int | None:
        """When the run may start, as create_run decides it; None when that is at once."""
        start = self.start_at_ms
        if start is None and self.delay_ms is not None:
            start = created_ms + self.delay_ms
        return start if start is not None and start > created_ms else None

    @property
    def metadata_json(self) -> str:
        """The metadata as stored (``{}``, the common case, without an encode)."""
        return dumps(self.metadata) if self.metadata else "{}"

    @property
    def input_json(self) -> str:
        """The input as stored: encoded once per run, for its size, its cost and the script."""
        return dumps(self.input) if self.encoded_input is None else self.encoded_input

    def fingerprint(self, metadata_json: str | None = None) -> str:
        """Hash of everything that defines the run, to tell a replay from a conflict.

        The JSON array of the parts, built from the already encoded input (the
        same text ``dumps`` of the whole list gives, so stored keys still match);
        ``metadata_json``: the metadata as the caller encoded it already.
        """
        return framed_fingerprint(self.fingerprint_frame(metadata_json), self.input_json)

    def fingerprint_frame(self, metadata_json: str | None = None) -> tuple[str, str]:
        """The fingerprint's text before and after the input: the same for every run of a
        batch that asks for the same things (:data:`_FRAME_FIELDS`)."""
        parts = [
            scalar_json(self.queue),
            scalar_json(self.max_attempts),
            scalar_json(self.on_lease_expired),
            self.metadata_json if metadata_json is None else metadata_json,
            "null" if self.budget is None else dumps(self.budget),
        ]
        if self.retention_ms is not None or self.queued_ttl_ms is not None:
            # only then: runs created before these existed keep their fingerprint
            parts.extend((scalar_json(self.retention_ms), scalar_json(self.queued_ttl_ms)))
        if self.start_at_ms is not None or self.delay_ms is not None:
            parts.extend((dumps(self.start_at_ms), dumps(self.delay_ms)))
        if self.rate_limits:
            parts.append(dumps([gate.bucket for gate in self.rate_limits]))
        flow = (self.concurrency_key, self.singleton_key, self.priority)
        if flow != (None, None, 0):
            # likewise: only runs that use flow control fingerprint it
            parts.extend(dumps(part) for part in (*flow, self.on_conflict))
        if self.versioning is not None:
            parts.append(scalar_json(self.versioning))  # likewise
        return f"[{scalar_json(self.handler)},", f",{','.join(parts)}]"


def metadata_bytes(metadata: dict[str, Any]) -> int:
    """What ``metadata`` weighs as stored (:attr:`NewRun.metadata_json`): its compact JSON's
    UTF-8 bytes, ``{}`` 2. LEASEHOLD_MAX_METADATA_BYTES bounds it on every path that writes it."""
    text = dumps(metadata) if metadata else "{}"
    return len(text) if text.isascii() else len(text.encode())


def framed_fingerprint(frame: tuple[str, str], input_json: str) -> str:
    """The fingerprint of a run whose :meth:`NewRun.fingerprint_frame` is ``frame``."""
    return hashlib.sha256(f"{frame[0]}{input_json}{frame[1]}".encode()).hexdigest()


# a NewRun's own fields (each run of a batch has its own: never in a shared frame), and
# those the frame's key holds as encoded (metadata, budget) or leaves out because a run
# that has them builds a frame of its own (rate_limits)
_OWN = ("input", "idempotency_key", "run_id", "encoded_input")
_ENCODED_IN_KEY = ("metadata", "budget")
_NOT_CACHED = ("rate_limits",)
# every other NewRun field is part of the create shape and fingerprint frame that runs of
# one create_many call share when they agree on it: derived, so a field added to NewRun is
# in the frame without being listed again (tests/store/test_fingerprints.py holds the split)
_FRAME_FIELDS = tuple(
    f.name for f in fields(NewRun) if f.name not in (*_OWN, *_ENCODED_IN_KEY, *_NOT_CACHED)
)


frame_fields = attrgetter(*_FRAME_FIELDS)
