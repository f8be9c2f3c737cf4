"""Creating runs: one, or a batch in chunks, each under its idempotency key.

A create is one ``create_run`` call (a batch: ``create_runs`` per chunk of one queue's
runs); the reply is shaped into the run a client sees without reading it back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

from app.errors import IdempotencyConflict, RunNotFound
from app.models import Run
from app.store.codec import (
    dumps,
    new_run_id,
    new_run_ids,
    run_from_hash,
)
from app.store.keys import queue_of_run
from app.store.lua.scripts import ScriptCode
from app.store.ratelimits.store import start_gates_arg
from app.store.runs.answers import Created, queued_fields, raise_refused
from app.store.runs.bindings import (
    CREATE_RUN,
    CREATE_RUNS,
    CreateArgs,
    CreateReply,
    CreateRun,
    CreateSegment,
    CreateShape,
)
from app.store.runs.new import NewRun, frame_fields, framed_fingerprint
from app.store.runs.reading import RunReading

log = logging.getLogger(__name__)


# the codes a create_runs reply carries per run, as plain text: a StrEnum member's
# comparison was ~4 % of the API's instructions per batch-created run
_OK, _REPLAYED = ScriptCode.OK.value, ScriptCode.REPLAYED.value


# what create_group keeps per call: a frame key's shape and fingerprint frame
Frames = dict[tuple[Any, ...], tuple[CreateShape, tuple[str, str]]]


# runs one create_runs call creates at most, and the input + metadata bytes after which a
# chunk closes: a call holds Redis alone (~30-60 us per run), and one past maxmemory is
# refused whole, so these bound both the pause and what a call can write past the mark
CREATE_CHUNK_RUNS = 100
CREATE_CHUNK_BYTES = 1 << 20


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
    raise_refused(new, reply)
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


class RunCreation(RunReading):
    """Creates runs (``create``, ``create_many``) and shapes their answers."""

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
            pipe.hgetall(self.keys(queue_of_run(run_id)).run(run_id))
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
            key = (metadata, budget, frame_fields(new))
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
            versioning=new.versioning or "",
        )

    def _queued(self, new: NewRun, reply: CreateReply) -> Created:
        """The run a ``create_run`` reply created; raises :class:`IdempotencyConflict`."""
        return Created(Run(**queued_fields(new, reply)), replayed=False)
