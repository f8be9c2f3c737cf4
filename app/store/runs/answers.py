"""A create's answer: the run as clients see it, built from what was sent and the
script's reply instead of read back, and encoded once per shape for a batch.
"""

from __future__ import annotations

import functools
import secrets
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic_core import to_json

from app.errors import IdempotencyConflict, InvalidTransition, SingletonConflict
from app.models import Run, RunStatus
from app.store.codec import (
    ms_to_datetime,
)
from app.store.lua.scripts import ScriptCode
from app.store.runs.bindings import (
    CreateReply,
)
from app.store.runs.new import NewRun, frame_fields

_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


# a shape not built yet (None is a shape that cannot be used: each run encoded whole)
_UNSEEN: Any = object()


class Created:
    """Result of :meth:`RunStore.create`: the run, and whether it existed already.

    A run :meth:`RunStore.create_many` has just created is kept as what made it
    (its :class:`NewRun` and the script's reply): a batch answers it as JSON
    (:meth:`answer_json`) without building and serializing the model, or even the
    dict of its fields; ``run`` builds it the first time someone asks.
    """

    __slots__ = ("_new", "_reply", "_run", "replayed")

    def __init__(
        self,
        run: Run | None,
        replayed: bool,
        new: NewRun | None = None,
        reply: CreateReply | None = None,
    ):
        assert run is not None or (new is not None and reply is not None)
        self._run, self.replayed = run, replayed
        self._new, self._reply = new, reply  # a fresh run's request and create reply

    @property
    def run(self) -> Run:
        """The run (built from its request and reply on first use)."""
        if self._run is None:
            assert self._new is not None and self._reply is not None
            self._run = Run(**queued_fields(self._new, self._reply))
        return self._run

    @property
    def queue_and_handler(self) -> tuple[str, str]:
        """The run's queue and handler (its metric labels), without building it."""
        if self._new is not None:
            return self._new.queue, self._new.handler
        return self.run.queue, self.run.handler

    def answer_json(self, shapes: AnswerShapes) -> str:
        """What the API answers for the run, as JSON text: the run's, a fresh one's
        encoded through its batch's ``shapes`` without building the :class:`Run`."""
        if self._run is not None or self._new is None or self._reply is None:
            return self.run.model_dump_json()
        return shapes.encode(self._new, self._reply)

    def __repr__(self) -> str:
        return f"Created(run={self._run or self._new!r}, replayed={self.replayed})"


def _answer_of(fields: dict[str, Any]) -> dict[str, Any]:
    """A queued run's answer from its fields: every other field at its default, JSON-ready."""
    return {**_queued_template(), **{k: _json_of(v) for k, v in fields.items()}}


# a fresh run's fields that differ run by run in a batch; the rest repeat (a shape)
_PER_RUN = ("id", "input", "idempotency_key", "root_id")


# what else of a NewRun its answer may show (queued_fields), beside the reply's created_at
# and the metadata: every field of the batch frame (new.py's frame_fields, derived from
# NewRun), so a field added to NewRun splits shapes without being listed here; one the
# answer does not show (traceparent, boost) only costs a shape the runs could have shared
_SHAPE_OF_NEW = frame_fields


# stand-ins for the per-run fields while a shape is encoded: random, so no input,
# key or metadata can hold one (a shape where one shows up twice is not used)
_MARK = secrets.token_hex(8)


class AnswerShapes:
    """Encodes the answers of one batch's fresh runs, most of it once per shape.

    The runs of a batch share most of their answer: queue, handler, attempts,
    ``created_at`` (one per chunk), metadata, every default. A shape is that JSON
    encoded once, exactly as the run's own fields over a queued run's defaults, with holes where
    the id, input, idempotency key and root id go; a run's answer is its shape
    with the holes filled (its input as already encoded for the script). Encoding
    each run's ~35 fields with pydantic was ~9 us of the API's ~60 us per run; the
    shape is found from the request and reply (:data:`_SHAPE_OF_NEW`) without
    building the run's fields.
    Per request: shapes are not kept past the batch.
    """

    def __init__(self) -> None:
        self._shapes: dict[tuple[Any, ...], tuple[str, ...] | None] = {}

    def encode(self, new: NewRun, reply: CreateReply) -> str:
        """The JSON text of the answer for the run ``new`` that ``reply`` says was created."""
        key = _shape_key(new, reply)
        shape = self._shapes.get(key, _UNSEEN)  # one hash of the key's ~14 values per run
        if shape is _UNSEEN:
            shape = self._shapes[key] = _shape_of(queued_fields(new, reply))
        if shape is None:
            return to_json(_answer_of(queued_fields(new, reply))).decode()
        idempotency_key, root_id = new.idempotency_key, new.root_id
        run_id = encode_basestring(reply.run_id)  # once: a top-level run is its own root
        head, after_id, after_input, after_key, tail = shape  # holes in _PER_RUN's order
        return "".join(
            (
                head,
                run_id,
                after_id,
                new.input_json,
                after_input,
                "null" if idempotency_key is None else encode_basestring(idempotency_key),
                after_key,
                encode_basestring(root_id) if root_id else run_id,
                tail,
            )
        )


def _shape_key(new: NewRun, reply: CreateReply) -> tuple[Any, ...]:
    """What a fresh run's answer shows but its _PER_RUN fields: runs equal in it share a shape."""
    return (reply.created_at_ms, new.metadata_json, *_SHAPE_OF_NEW(new))


def _shape_of(fields: dict[str, Any]) -> tuple[str, ...] | None:
    """``fields``' answer as JSON cut where _PER_RUN's fields go, in that order: 5 segments.

    None when a stand-in shows up more than once or out of that order (then each
    run is encoded whole).
    """
    marks = [f'"{_MARK}:{name}:"' for name in _PER_RUN]
    holed = {**fields, **{name: mark[1:-1] for name, mark in zip(_PER_RUN, marks, strict=True)}}
    text = to_json(_answer_of(holed)).decode()
    segments, start = [], 0
    for mark in marks:
        at = text.find(mark, start)
        if at < 0 or text.count(mark[1:-1]) != 1:
            return None
        segments.append(text[start:at])
        start = at + len(mark)
    return (*segments, text[start:])


@functools.cache
def _queued_template() -> dict[str, Any]:
    """A queued run's JSON with every field at its default, in the model's field order."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return Run(id="", queue="", handler="", status=RunStatus.QUEUED, created_at=epoch).model_dump(
        mode="json"
    )


@functools.lru_cache(maxsize=256)
def _datetime_json(value: datetime) -> str:
    """A time as the model serializes it (a chunk's runs share one ``created_at``)."""
    return cast(str, _DATETIME.dump_python(value, mode="json"))


def _json_of(value: Any) -> Any:
    if isinstance(value, datetime):
        return _datetime_json(value)
    if isinstance(value, RunStatus):
        return value.value
    return value


def queued_fields(new: NewRun, reply: CreateReply) -> dict[str, Any]:
    """The fields of the :class:`Run` a create reply made; raises what its code means
    (:func:`raise_refused`)."""
    raise_refused(new, reply)
    created_ms = int(reply.created_at_ms)
    start_ms = new.start_ms(created_ms)
    return {
        "id": reply.run_id,
        "queue": new.queue,
        "handler": new.handler,
        "status": RunStatus.QUEUED,
        "input": new.input,
        "max_attempts": new.max_attempts,
        "on_lease_expired": new.on_lease_expired,
        "created_at": ms_datetime(created_ms),
        "idempotency_key": new.idempotency_key,
        "metadata": new.metadata,
        "retention_s": None if new.retention_ms is None else new.retention_ms / 1000,
        "run_at": None if start_ms is None else ms_datetime(start_ms),
        "concurrency_key": new.concurrency_key,
        "singleton_key": new.singleton_key,
        "priority": new.priority,
        "parent_id": new.parent_id,
        "root_id": new.root_id or reply.run_id,
        "depth": new.depth,
        "versioning": new.versioning or "auto_upgrade",
    }


@functools.lru_cache(maxsize=256)
def ms_datetime(ms: int) -> datetime:
    """:func:`ms_to_datetime`, remembered: the runs of a chunk share one ``created_at``."""
    at = ms_to_datetime(ms)
    assert at is not None
    return at


def raise_refused(new: NewRun, reply: CreateReply) -> None:
    """Raise what a create reply's refusal means; nothing for a run it created.

    :class:`IdempotencyConflict`, :class:`SingletonConflict`, or
    :class:`InvalidTransition` for a child its parent's end cancelled first.
    """
    if reply.code == ScriptCode.CONFLICT:
        raise IdempotencyConflict(new.idempotency_key or "", reply.run_id)
    if reply.code == ScriptCode.SINGLETON:
        raise SingletonConflict(new.singleton_key or "", reply.run_id)
    if reply.code == ScriptCode.CANCEL:
        # a child whose parent ended (and cancelled it) before this create came
        raise InvalidTransition(reply.run_id, RunStatus.CANCELLED.value, "create")
