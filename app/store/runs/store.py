"""Client-side transitions: create, read, list and cancel runs, read their events.

Everything here is safe to call from any number of API replicas at once; the
transitions that change state are single Lua scripts (see ``scripts/lua``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring
from operator import attrgetter
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic_core import to_json
from redis.exceptions import RedisError, ResponseError

from app.errors import IdempotencyConflict, InvalidTransition, RunNotFound, SingletonConflict
from app.models import Run, RunEvent, RunStatus
from app.read_models import PurgeRequest, PurgeResult, ResolveRequest, RunPage
from app.store.codec import (
    LARGE_FIELDS,
    SUMMARY_FIELDS,
    dumps,
    event_from_entry,
    ms_to_datetime,
    new_run_id,
    new_run_ids,
    run_from_hash,
    scalar_json,
)
from app.store.context import Store
from app.store.keys import GlobalKeys, queue_of
from app.store.lua.scripts import ScriptCode
from app.store.lua.transition import A, StatusReply, Transition, raise_for
from app.store.outbox.store import Outbox
from app.store.queues.store import declared_queues
from app.store.ratelimits.store import StartGate, start_gates_arg
from app.store.runs.bindings import (
    CANCEL_RUN,
    CREATE_RUN,
    CREATE_RUNS,
    DELETE_RUN,
    READ_EVENTS,
    RESOLVE_RUN,
    RESUME_RUN,
    CancelArgs,
    CreateArgs,
    CreateReply,
    CreateRun,
    CreateSegment,
    CreateShape,
    DeleteArgs,
    ReadEventsArgs,
    ReadEventsReply,
    ResolveArgs,
    ResumeArgs,
)
from app.store.runs.positions import Position as _Position

log = logging.getLogger(__name__)

LIST_SCAN_CHUNK = 200
LIST_SCAN_BUDGET = 5000
# runs whose large fields (input, output, metadata) one round trip of a listing reads
LIST_LOAD_CHUNK = 8
# JSON keys, quotes and dates a listed run adds to its stored bytes, roughly
LIST_ITEM_OVERHEAD_BYTES = 512
_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)
# runs one create_runs call creates at most, and the input + metadata bytes after which a
# chunk closes: a call holds Redis alone (~30-60 us per run), and one past maxmemory is
# refused whole, so these bound both the pause and what a call can write past the mark
CREATE_CHUNK_RUNS = 100
CREATE_CHUNK_BYTES = 1 << 20


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
        return f"[{scalar_json(self.handler)},", f",{','.join(parts)}]"


def framed_fingerprint(frame: tuple[str, str], input_json: str) -> str:
    """The fingerprint of a run whose :meth:`NewRun.fingerprint_frame` is ``frame``."""
    return hashlib.sha256(f"{frame[0]}{input_json}{frame[1]}".encode()).hexdigest()


# a NewRun's fields that its create shape and fingerprint frame are made of, beside its
# metadata and budget (as encoded); the others are its own: input, idempotency_key, run_id
# (and encoded_input, the input's text). Runs of one create_many call equal in these share
# one shape and one frame, built once (tests/store/test_fingerprints.py holds the split)
_FRAME_FIELDS = (
    "handler",
    "queue",
    "max_attempts",
    "on_lease_expired",
    "retention_ms",
    "queued_ttl_ms",
    "traceparent",
    "start_at_ms",
    "delay_ms",
    "concurrency_key",
    "singleton_key",
    "on_conflict",
    "priority",
    "boost_ms",
    "parent_id",
    "root_id",
    "depth",
)
_frame_fields = attrgetter(*_FRAME_FIELDS)
# what create_group keeps per call: a frame key's shape and fingerprint frame
Frames = dict[tuple[Any, ...], tuple[CreateShape, tuple[str, str]]]


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
            self._run = Run(**_queued_fields(self._new, self._reply))
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
# what else of a NewRun its answer shows (_queued_fields), beside the reply's created_at:
# runs that agree on these and on their metadata share a shape
_SHAPE_OF_NEW = attrgetter(
    "queue",
    "handler",
    "max_attempts",
    "on_lease_expired",
    "retention_ms",
    "start_at_ms",
    "delay_ms",
    "concurrency_key",
    "singleton_key",
    "priority",
    "parent_id",
    "depth",
)
# stand-ins for the per-run fields while a shape is encoded: random, so no input,
# key or metadata can hold one (a shape where one shows up twice is not used)
_MARK = secrets.token_hex(8)


# a shape not built yet (None is a shape that cannot be used: each run encoded whole)
_UNSEEN: Any = object()


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
            shape = self._shapes[key] = _shape_of(_queued_fields(new, reply))
        if shape is None:
            return to_json(_answer_of(_queued_fields(new, reply))).decode()
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


@dataclass(frozen=True)
class FeedRead:
    """One read of a run's stream by a live feed (:meth:`RunStore.read_new_events`)."""

    events: list[RunEvent]
    # entries written after the feed's position and trimmed before it read them;
    # -1 when some may have been but Redis (before 7.0) does not count them
    missing: int


class RunStore(Store):
    """Performs the client-side transitions on a :class:`StoreContext`."""

    @property
    def global_keys(self) -> GlobalKeys:
        """Keys that span queues."""
        return GlobalKeys(self.prefix)

    async def create(self, new: NewRun) -> Created:
        """Create a queued run, or return the run an idempotency key already names.

        Raises :class:`IdempotencyConflict` when the key was used with another body.
        The queue must be declared (the API checks it with ``QueueStore.require``):
        creating a run never declares one.
        """
        args = self.create_args(new)
        reply = await CREATE_RUN.send(self.scripts, self.client, self.keys(new.queue), args)
        if reply.code == ScriptCode.REPLAYED:
            return Created(await self.get(reply.run_id), replayed=True)
        return self._queued(new, reply)

    async def create_many(self, news: Sequence[NewRun]) -> list[Created | Exception]:
        """Create several runs, a chunk of one queue's per script call; one outcome per run.

        Each chunk is one ``create_runs`` call (up to :data:`CREATE_CHUNK_RUNS` runs
        and about :data:`CREATE_CHUNK_BYTES` of input and metadata: a call runs
        alone in Redis, and one past ``maxmemory`` is refused whole before it
        writes, so both bound what a call holds Redis for and writes past the
        mark); a queue's chunks share one pipeline. Each run is created exactly
        as :meth:`create` creates it (create.lua ``create_one``), one after the
        other: a run refused (:class:`IdempotencyConflict` in its place) leaves
        the others standing, and runs of one batch naming the same idempotency
        key meet like two requests in that order (replay or conflict). An error
        reply (OOM) is the outcome of every run of its chunk, and nothing of that
        chunk was written. Queues are sent concurrently, each on its own node in
        cluster mode. Raises only when Redis cannot be reached at all; then some
        may stand (their idempotency keys make a retry safe).
        """
        by_queue: dict[str, list[int]] = {}
        for i, new in enumerate(news):
            by_queue.setdefault(new.queue, []).append(i)
        outcomes: list[Created | Exception] = [RunNotFound("")] * len(news)

        async def one_queue(queue: str, indexes: list[int]) -> None:
            keys = self.keys(queue)
            frames: Frames = {}
            run_ids = new_run_ids(queue, len(indexes))  # one clock read; a run's own id wins
            parts = [
                self.create_group(news[i], frames, run_id)
                for i, run_id in zip(indexes, run_ids, strict=True)
            ]
            chunks = _chunks(parts)
            calls = [
                CREATE_RUNS.call(keys, self._args_of(queue, _segments(parts[c]))) for c in chunks
            ]
            replies = await self.scripts.pipeline(self.client, calls, raise_on_error=False)
            replayed: dict[int, str] = {}
            for chunk, raw in zip(chunks, replies, strict=True):
                if isinstance(raw, Exception):
                    for i in indexes[chunk]:
                        outcomes[i] = raw
                    continue
                _settle_chunk(news, indexes[chunk], CREATE_RUNS.decode(raw), outcomes, replayed)
            if replayed:
                found = await self._get_many(list(replayed.values()))
                for i, run in zip(replayed, found, strict=True):
                    outcomes[i] = Created(run, replayed=True) if run else RunNotFound(replayed[i])

        await asyncio.gather(*(one_queue(queue, indexes) for queue, indexes in by_queue.items()))
        return outcomes

    async def _get_many(self, run_ids: list[str]) -> list[Run | None]:
        """Several runs in one round trip; None for one that is gone (deleted meanwhile)."""
        pipe = self.client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hgetall(self.keys(_queue(run_id)).run(run_id))
        replies = cast(list[dict[str, str]], await pipe.execute())
        return [run_from_hash(fields) if fields else None for fields in replies]

    def create_args(self, new: NewRun) -> CreateArgs:
        """``create_run``'s ARGV for ``new`` (a new id unless ``new.run_id`` names one)."""
        shape, run = self.create_group(new)
        return self._args_of(new.queue, [(shape, (run,))])

    def _args_of(self, queue: str, segments: list[CreateSegment]) -> CreateArgs:
        """The ARGV of a create of ``segments``, runs of ``queue``."""
        return CreateArgs(
            queue=queue,
            maxlen=self.events_maxlen,
            wake_channel=self.keys(queue).wake_channel,
            retention=self.retention.script_arg(),
            groups=segments,
        )

    def create_group(
        self, new: NewRun, frames: Frames | None = None, run_id: str | None = None
    ) -> tuple[CreateShape, CreateRun]:
        """One run's part of ``create_run`` / ``create_runs`` ARGV: its shape, its own fields.

        ``frames``: shapes and fingerprint frames already built in this call, reused
        for a run that agrees with an earlier one in :data:`_FRAME_FIELDS`, its
        metadata and budget (a batch's runs mostly do: building them was ~40 % of
        the store's Python per run); the values are the ones the API validated
        (ints are ints), so equal keys build equal shapes. A run with rate limits
        builds its own. ``run_id``: its id unless ``new.run_id`` names one (None: a new one).
        """
        metadata = new.metadata_json
        frame: tuple[str, str] | None = None  # None: not built (yet) for this run
        if frames is None or new.rate_limits:
            shape = self._shape_of(new, metadata)
        else:
            budget = None if new.budget is None else dumps(new.budget)
            key = (metadata, budget, _frame_fields(new))
            framed = frames.get(key)
            if framed is None:
                framed = frames[key] = (
                    self._shape_of(new, metadata),
                    new.fingerprint_frame(metadata),
                )
            shape, frame = framed
        input_json = new.input_json
        # only an idempotency key's record keeps a fingerprint (to tell a replay from a
        # conflict): a run without one sends '' and hashes nothing
        fingerprint = ""
        if new.idempotency_key:
            fingerprint = framed_fingerprint(frame or new.fingerprint_frame(metadata), input_json)
        # tuple.__new__ in CreateRun's field order (run_id, input, idempotency_key,
        # fingerprint): its NamedTuple __new__ is a Python function, a frame per run
        run: CreateRun = tuple.__new__(
            CreateRun,
            (
                new.run_id or run_id or new_run_id(new.queue),
                input_json,
                new.idempotency_key or "",
                fingerprint,
            ),
        )
        return shape, run

    assert CreateRun._fields == ("run_id", "input", "idempotency_key", "fingerprint"), (
        "create_group builds a CreateRun by position"
    )

    def _shape_of(self, new: NewRun, metadata: str) -> CreateShape:
        """What ``new`` shares with the other runs of its segment (``metadata``: encoded)."""
        return CreateShape(
            handler=new.handler,
            max_attempts=new.max_attempts,
            on_lease_expired=new.on_lease_expired,
            metadata=metadata,
            budget=dumps(new.budget) if new.budget else "",
            retention_ms="" if new.retention_ms is None else new.retention_ms,
            queued_ttl_ms=new.queued_ttl_ms or self.queued_ttl_ms,
            traceparent=new.traceparent or "",
            start_at_ms="" if new.start_at_ms is None else new.start_at_ms,
            delay_ms="" if new.delay_ms is None else new.delay_ms,
            rate_limits=start_gates_arg(new.rate_limits),
            concurrency_key=new.concurrency_key or "",
            singleton_key=new.singleton_key or "",
            on_conflict=new.on_conflict,
            priority=new.priority,
            boost_ms=new.boost_ms,
            parent_id=new.parent_id or "",
            root_id=new.root_id or "",
            depth=new.depth,
        )

    def _queued(self, new: NewRun, reply: CreateReply) -> Created:
        """The run a ``create_run`` reply created; raises :class:`IdempotencyConflict`."""
        return Created(Run(**_queued_fields(new, reply)), replayed=False)

    async def get(self, run_id: str) -> Run:
        """The run with this id; raises :class:`RunNotFound` (also for malformed ids)."""
        fields = cast(
            dict[str, str], await self.client.hgetall(self.keys(_queue(run_id)).run(run_id))
        )
        if not fields:
            raise RunNotFound(run_id)
        return run_from_hash(fields)

    async def cancel(self, run_id: str) -> RunStatus:
        """Ask a run to stop; returns its status afterwards (cancelled or cancelling).

        Idempotent. Raises :class:`RunNotFound`, or :class:`InvalidTransition` when
        the run already ended in another terminal state.
        """
        keys = self.keys(_queue(run_id))
        args = CancelArgs(
            run_id, self.retention.script_arg(), self.events_maxlen, keys.cancel_channel
        )
        reply = await self._on_run(CANCEL_RUN, run_id, args, "cancel")
        if reply.status == RunStatus.CANCELLED.value:
            await self._cascade_now(run_id)
        return RunStatus(reply.status)

    async def _cascade_now(self, run_id: str) -> None:
        """A cancelled parent's children are cancelled at once (issue 17); never raises.

        One take of the outbox entry its end left; a run without children has none.
        What fails here stays in the outbox for the reconcilers' sweep.
        """
        try:
            await Outbox(self.ctx).deliver_end_of(run_id)
        except RedisError as exc:
            log.warning("the cascade of %s was left to the outbox sweep: %s", run_id, exc)

    async def delete(self, run_id: str) -> RunStatus:
        """Delete a finished run and every key of it now; returns the status it had.

        Raises :class:`RunNotFound` (also when already deleted or expired), or
        :class:`InvalidTransition` when the run is not terminal: nothing is deleted.
        """
        reply = await self._on_run(DELETE_RUN, run_id, DeleteArgs(run_id), "delete")
        return RunStatus(reply.status)

    async def _on_run(
        self, binding: Transition[A, StatusReply], run_id: str, args: A, action: str
    ) -> StatusReply:
        """Run a client's transition of one run, raising what its code means."""
        keys = self.keys(_queue(run_id))
        reply = await binding.send(self.scripts, self.client, keys, args, run_id)
        raise_for(reply.code, run_id=run_id, status=reply.status, action=action)
        return reply

    async def purge(self, request: PurgeRequest) -> PurgeResult:
        """Delete one bounded batch of the finished runs the request's filters match.

        Looks at up to ``request.limit`` runs (newest first, as :meth:`list_runs`
        filters them by queue, status and handler), keeps the terminal ones that
        finished before ``finished_before``, and deletes them in one round trip.
        ``delete_run`` re-checks each inside Redis, so a run that is not terminal
        by then is never deleted; repeating a call deletes nothing twice. Raises
        :class:`InvalidCursor` for a cursor this store did not produce.
        """
        before = request.finished_before
        page = await self.list_runs(
            queue=request.queue,
            status=request.status,
            handler=request.handler,
            limit=request.limit,
            cursor=request.cursor,
            # a run finishes after it is created: one created later cannot match
            created_before_ms=None if before is None else int(before.timestamp() * 1000),
        )
        doomed = [
            run.id
            for run in page.items
            if run.status.is_terminal
            and (before is None or (run.finished_at is not None and run.finished_at < before))
        ]
        deleted: list[str] = []
        if doomed:
            replies = await self.scripts.pipeline(
                self.client,
                [DELETE_RUN.call(self.keys(_queue(rid)), DeleteArgs(rid)) for rid in doomed],
            )
            deleted = [
                rid
                for rid, reply in zip(doomed, replies, strict=True)
                if DELETE_RUN.decode(reply).code == ScriptCode.OK
            ]
        return PurgeResult(
            deleted=len(deleted),
            ids=deleted,
            next_cursor=page.next_cursor,
            done=page.next_cursor is None,
        )

    async def resume(self, run_id: str, resume_input: Any) -> None:
        """Queue a ``waiting_human`` run again with a person's input (fence+1).

        Raises :class:`RunNotFound`, or :class:`InvalidTransition` for any other status.
        """
        keys = self.keys(_queue(run_id))
        args = ResumeArgs(run_id, dumps(resume_input), self.events_maxlen, keys.wake_channel)
        await self._on_run(RESUME_RUN, run_id, args, "resume")

    async def read_events(
        self, run_id: str, *, after: str | None = None, count: int = 1000
    ) -> list[RunEvent]:
        """Up to ``count`` events of a run, oldest first, strictly after stream id ``after``."""
        start = f"({after}" if after else "-"
        entries = cast(
            list[tuple[str, dict[str, str]]],
            await self.client.xrange(
                self.keys(_queue(run_id)).events(run_id), start, "+", count=count
            ),
        )
        return [event_from_entry(run_id, entry_id, fields) for entry_id, fields in entries]

    def events_key(self, run_id: str) -> str:
        """The key of a run's event stream; raises :class:`RunNotFound` for a malformed id."""
        return self.keys(_queue(run_id)).events(run_id)

    async def feed_start(self, run_id: str) -> tuple[str, int]:
        """Where a live feed starts: the stream's newest id and its entries-added count.

        Both come from one ``XINFO STREAM``, so they describe the same moment; a run
        without a stream yet starts at ``("0-0", 0)``. Redis before 7.0 does not count
        entries added (0 then: see :meth:`read_new_events`).
        """
        key = self.keys(_queue(run_id)).events(run_id)
        try:
            info = await self.client.xinfo_stream(key)
        except ResponseError as exc:
            if "no such key" not in str(exc):
                raise
            return "0-0", 0
        return str(info["last-generated-id"]), int(info.get("entries-added") or 0)

    async def read_new_events(
        self, run_id: str, *, after: str, added: int, count: int = 1000
    ) -> FeedRead:
        """Up to ``count`` events after ``after``, and how many were trimmed unread before them.

        ``added`` is the stream's entries-added count when ``after`` was written
        (from :meth:`feed_start`, then advanced by what each read returned and missed).
        Never blocks: :func:`app.store.redis.feeds.wait_for_news` waits for news first.
        """
        keys = self.keys(_queue(run_id))
        args = ReadEventsArgs(after, added, count)
        return _feed_read(
            run_id, await READ_EVENTS.send(self.scripts, self.client, keys, args, run_id)
        )

    async def stream_bounds(self, run_id: str) -> tuple[RunEvent | None, str | None]:
        """The oldest retained event of a run's stream and the id of its newest one."""
        key = self.keys(_queue(run_id)).events(run_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.xrange(key, "-", "+", count=1)
        pipe.xrevrange(key, "+", "-", count=1)
        oldest, newest = cast(list[list[tuple[str, dict[str, str]]]], await pipe.execute())
        first = event_from_entry(run_id, oldest[0][0], oldest[0][1]) if oldest else None
        return first, newest[0][0] if newest else None

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
        nothing older remains. Raises :class:`InvalidCursor` for a cursor this store
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
        scanned = 0
        while scanned < LIST_SCAN_BUDGET:
            batch = await self._next_positions(queues, after)
            if not batch:
                return RunPage(items=page.items, next_cursor=None)
            scanned += len(batch)
            stop = await self._fill(
                page,
                batch,
                after,
                _Filter(status, handler, metadata or {}, parent_id, root_id),
                include,
            )
            if stop is not None:
                return RunPage(items=page.items, next_cursor=stop.encode())
            after = batch[-1]
        return RunPage(items=page.items, next_cursor=after.encode() if after else None)

    async def _fill(
        self,
        page: _Page,
        batch: list[_Position],
        after: _Position | None,
        wanted: _Filter,
        include: frozenset[str],
    ) -> _Position | None:
        """Add a batch's matching runs to ``page``; the position to resume after if it filled."""
        matched: list[_Matched] = []
        previous = after
        for position, fields in zip(batch, await self._read(batch, SUMMARY_FIELDS), strict=True):
            if fields is not None and wanted.matches(run_from_hash(fields)):
                matched.append((position, previous, fields))
            previous = position
        if wanted.metadata:
            matched = await self._with_metadata(matched, wanted.metadata)
        large = tuple(field for field in LARGE_FIELDS if field in include)
        step = LIST_LOAD_CHUNK if large else max(1, len(matched))
        for start in range(0, len(matched), step):
            chunk = matched[start : start + step]
            extras = await self._read([p for p, _, _ in chunk], large) if large else []
            for index, (position, previous, fields) in enumerate(chunk):
                record = {**fields, **(extras[index] or {})} if large else fields
                if not page.add(run_from_hash(record), _stored_bytes(record)):
                    assert previous is not None, "an empty page takes any first item"
                    return previous
                if page.full:
                    return position
        return None

    async def _with_metadata(
        self, matched: list[_Matched], pairs: Mapping[str, str]
    ) -> list[_Matched]:
        """The runs whose metadata holds every pair, reading it ``LIST_LOAD_CHUNK`` at a time.

        Metadata may be large: read only for runs the summary filters kept, a few
        per round trip, and dropped once judged (a listing returns it only when
        ``include`` asks), so filtering by it never holds a whole scan's metadata.
        """
        kept: list[_Matched] = []
        for start in range(0, len(matched), LIST_LOAD_CHUNK):
            chunk = matched[start : start + LIST_LOAD_CHUNK]
            extras = await self._read([position for position, _, _ in chunk], ("metadata",))
            for item, extra in zip(chunk, extras, strict=True):
                metadata = run_from_hash({**item[2], **extra}).metadata if extra else None
                if metadata is not None and _metadata_holds(metadata, pairs):
                    kept.append(item)
        return kept

    async def _read(
        self, batch: list[_Position], fields: tuple[str, ...]
    ) -> list[dict[str, str] | None]:
        """HMGET ``fields`` of each listed run in one round trip; None (and pruned) if gone."""
        pipe = self.client.pipeline(transaction=False)
        for position in batch:
            pipe.hmget(self.keys(_queue(position.run_id)).run(position.run_id), ["id", *fields])
        replies: list[list[str | None]] = await pipe.execute()
        records: list[dict[str, str] | None] = []
        for position, values in zip(batch, replies, strict=True):
            if values[0] is None:
                # the record expired after its retention: drop it from the listing index
                await self.client.zrem(self.keys(_queue(position.run_id)).runs, position.run_id)
                records.append(None)
                continue
            named = zip(fields, values[1:], strict=True)
            records.append({name: value for name, value in named if value is not None})
        return records

    async def _next_positions(self, queues: list[str], after: _Position | None) -> list[_Position]:
        """The next chunk of positions older than ``after``, merged across queues."""
        merged: list[_Position] = []
        boundary: _Position | None = None
        for name in queues:
            chunk = await self._queue_positions(name, after)
            merged.extend(chunk)
            if len(chunk) == LIST_SCAN_CHUNK:
                # this queue has more beyond its last fetched item: nothing older is safe
                boundary = chunk[-1] if boundary is None else max(boundary, chunk[-1])
        merged.sort(reverse=True)
        if boundary is not None:
            merged = [position for position in merged if position >= boundary]
        return merged

    async def _queue_positions(self, queue: str, after: _Position | None) -> list[_Position]:
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

    async def resolve(self, run_id: str, decision: ResolveRequest) -> Run:
        """Apply a person's decision to a ``reconciliation_required`` run; returns the run.

        Raises :class:`RunNotFound`, or :class:`InvalidTransition` for any other status.
        """
        keys = self.keys(_queue(run_id))
        args = ResolveArgs(
            run_id=run_id,
            action=decision.action,
            output=dumps(decision.output) if decision.action == "succeed" else "",
            effect_outcome=decision.effect_outcome or "",
            effect_result=(
                dumps(decision.effect_result) if decision.effect_outcome == "applied" else ""
            ),
            note=decision.note or "",
            retention=self.retention.script_arg(),
            maxlen=self.events_maxlen,
            wake_channel=keys.wake_channel,
        )
        await self._on_run(RESOLVE_RUN, run_id, args, "resolve")
        return await self.get(run_id)


def _feed_read(run_id: str, reply: ReadEventsReply) -> FeedRead:
    """The events of a ``read_events`` reply (entries with flat field lists), and the gap."""
    events = [
        event_from_entry(run_id, entry_id, dict(zip(fields[::2], fields[1::2], strict=True)))
        for entry_id, fields in reply.entries
    ]
    return FeedRead(events, reply.missing)


def _queued_fields(new: NewRun, reply: CreateReply) -> dict[str, Any]:
    """The fields of the :class:`Run` a create reply made; raises what its code means
    (:func:`_raise_refused`)."""
    _raise_refused(new, reply)
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
        "created_at": _ms_datetime(created_ms),
        "idempotency_key": new.idempotency_key,
        "metadata": new.metadata,
        "retention_s": None if new.retention_ms is None else new.retention_ms / 1000,
        "run_at": None if start_ms is None else _ms_datetime(start_ms),
        "concurrency_key": new.concurrency_key,
        "singleton_key": new.singleton_key,
        "priority": new.priority,
        "parent_id": new.parent_id,
        "root_id": new.root_id or reply.run_id,
        "depth": new.depth,
    }


@functools.lru_cache(maxsize=256)
def _ms_datetime(ms: int) -> datetime:
    """:func:`ms_to_datetime`, remembered: the runs of a chunk share one ``created_at``."""
    at = ms_to_datetime(ms)
    assert at is not None
    return at


def _raise_refused(new: NewRun, reply: CreateReply) -> None:
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


# the codes a create_runs reply carries per run, as plain text: a StrEnum member's
# comparison was ~4 % of the API's instructions per batch-created run
_OK, _REPLAYED = ScriptCode.OK.value, ScriptCode.REPLAYED.value


def _settle_chunk(
    news: Sequence[NewRun],
    indexes: list[int],
    replies: list[CreateReply],
    outcomes: list[Created | Exception],
    replayed: dict[int, str],
) -> None:
    """Each run's outcome of one create_runs chunk into ``outcomes``; a replay's id into
    ``replayed`` (its run is read afterwards)."""
    for i, reply in zip(indexes, replies, strict=True):
        code = reply.code
        if code == _OK:  # most runs: created (what _fresh makes of them)
            outcomes[i] = Created(None, False, news[i], reply)
        elif code == _REPLAYED:
            replayed[i] = reply.run_id
        else:
            outcomes[i] = _settled(_fresh, news[i], reply)


def _fresh(new: NewRun, reply: CreateReply) -> Created:
    """A run create_many created, kept as its request and reply (:class:`Created`)."""
    _raise_refused(new, reply)
    return Created(None, False, new, reply)


def _chunks(parts: list[tuple[CreateShape, CreateRun]]) -> list[slice]:
    """``parts`` cut in order into create_runs chunks (:data:`CREATE_CHUNK_RUNS`, bytes)."""
    chunks: list[slice] = []
    start = size = 0
    for end, (shape, run) in enumerate(parts):
        cost = len(run.input) + len(shape.metadata)
        if end > start and (end - start >= CREATE_CHUNK_RUNS or size + cost > CREATE_CHUNK_BYTES):
            chunks.append(slice(start, end))
            start, size = end, 0
        size += cost
    if start < len(parts):
        chunks.append(slice(start, len(parts)))
    return chunks


def _segments(parts: list[tuple[CreateShape, CreateRun]]) -> list[CreateSegment]:
    """Runs in order, each stretch of one shape as one segment (its shape sent once).

    Why: the runs of a batch mostly share everything but their id, input, key and
    fingerprint; Redis checks a shape once per segment, and the call carries 4
    values per run instead of 23.
    """
    segments: list[CreateSegment] = []
    last: CreateShape | None = None
    runs: list[CreateRun] = []
    for shape, run in parts:
        if shape != last:
            runs = []
            segments.append((shape, runs))
            last = shape
        runs.append(run)
    return segments


def _settled(create: Callable[..., Created], *args: Any) -> Created | Exception:
    """A create's result, or the conflict it raised, as a value."""
    try:
        return create(*args)
    except IdempotencyConflict as exc:
        return exc


def _queue(run_id: str) -> str:
    queue = queue_of(run_id)
    if queue is None:
        raise RunNotFound(run_id)
    return queue


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


# a listed run on its way to a page: its position, the one before it, its summary
_Matched = tuple["_Position", "_Position | None", dict[str, str]]


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
