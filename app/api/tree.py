"""One SSE stream for a run and all its descendants: ``GET /runs/{id}/events?include=children``.

Each run's events stay in its own stream, in its own queue's slot; this module
reads every stream separately (no cross-slot command, Redis Cluster safe) and
merges them into one order that a resume can reproduce.

**The order.** Every event of the tree gets a key :class:`TreeKey`
``(first, ulid, order)``: ``order`` is the event's stream id, ``ulid`` the
run id's ULID (unique per run: it breaks ties between two streams that wrote
the same id in the same ms), and ``first`` is ``max(order, (S, 0))`` where
``S`` is the ms at which the run's entry was written into its parent's
children index, or its parent's own ``S`` if later (0 for the run the stream
was asked for). The SSE id of each
message is its key, so ``Last-Event-ID`` says exactly where a client stopped.

**The horizon.** An event is sent only once no event with a smaller key can
still appear. Each round reads the Redis clock ``T`` first (the earliest of
every primary's, in a cluster), then every open stream and children index.
Anything written after that read gets a stream id, or an index score, of
``T`` or more, so every key whose ``first`` is below ``(T, 0)`` is already in
what the round read: those go out, in key order; the rest wait for a later
round. A stream read that came back full (more to read) lowers the horizon to
its last event, and a child found in this round to its index score. Why
``first`` and not the stream id alone: a child's first events are written in
its own slot before its parent's index names it; ordered by stream id alone
they could fall below what was already sent, and a resume would skip them.
Shifted up to the index score, they sort after everything sent before the
child could be seen.

So a resume from any ``Last-Event-ID`` delivers every event of every run with
a larger key, and none with a smaller one: each event exactly once across
reconnects. History trimmed from a capped stream is reported per run with a
``replay_unavailable`` event (no id), as the single-run stream does.

**Rounds** are polls: right away while there is more to read, then at
:data:`POLL_MIN_S`, doubling while nothing happens up to :data:`POLL_MAX_S`, or
longer for a tree so big that a round a second would cost more than
:data:`IDLE_COMMANDS_PER_S` (a round reads every open run: three commands each).
They go through the API's tree pool (``TREE_POOL_CONNECTIONS``), never the
requests' one; a round Redis fails (or the pool is slow to give) is read again after
a backoff, since the 200 went out: never a traceback mid-stream. A process serves at
most ``LEASEHOLD_SSE_MAX_TREE_STREAMS`` of them, each also one of its
``LEASEHOLD_SSE_MAX_FOLLOWERS`` (503 with ``Retry-After`` past either, before the 200).
The stream ends once every run followed has sent its terminal event and no
more children can appear (each ended run's index was read after its end): a
last ``tree_ended`` event (no id) says so, so a client can tell the end from a
dropped connection. A child its parent's index names only after the parent
ended (a stale worker's late spawn) is not followed.

**Bound.** It follows at most ``LEASEHOLD_TREE_STREAM_MAX_RUNS`` runs: the
first found, breadth first by index order. Past that one ``tree_truncated``
event (no id) names the limit and the first child left out, and the others are
not followed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fastapi import HTTPException
from redis.exceptions import RedisError
from sse_starlette import ServerSentEvent

from app.api.eventstream import EventStream
from app.api.state import ApiState
from app.api.streaming import event_stream_response
from app.models import TERMINAL_EVENT_TYPES, RunEvent, event_id_order
from app.retry import REDIS_BACKOFF
from app.store.family.tree import IndexRead, Round, StreamChunk, StreamRead, TreeStore
from app.store.redis.refusals import describe
from app.store.runs.positions import Position
from app.telemetry.metrics import SSE_EVENTS_SENT, SSE_SUBSCRIBERS

log = logging.getLogger(__name__)

# events read per run per round: bounds what one round holds to max_runs x this
TREE_READ_CHUNK = 200
POLL_MIN_S = 0.05
POLL_MAX_S = 1.0
# what an idle tree stream may cost Redis: its rounds are spaced so that it sends no
# more commands a second than this (a 51-run idle tree sent 153 a second at POLL_MAX_S)
IDLE_COMMANDS_PER_S = 50

Order = tuple[int, int]
_KEY = re.compile(r"^(\d{1,20})-(\d{1,20})\.([0-9A-HJKMNP-TV-Z]{26})(?:\.(\d{1,20}))?$")
_U64 = 2**64 - 1


@dataclass(frozen=True, order=True)
class TreeKey:
    """An event's place in the tree's order; its text is the SSE id (see the module doc)."""

    first: Order
    ulid: str
    order: Order

    @classmethod
    def of(cls, event_id: str, ulid: str, shift_ms: int) -> TreeKey:
        """The key of the event ``event_id`` of the run ``ulid`` indexed at ``shift_ms``."""
        order = event_id_order(event_id)
        return cls(max(order, (shift_ms, 0)), ulid, order)

    def encode(self) -> str:
        """``<ms>-<seq>.<ULID>``, with ``.<index ms>`` appended when shifted up to it."""
        text = f"{self.order[0]}-{self.order[1]}.{self.ulid}"
        return text if self.first == self.order else f"{text}.{self.first[0]}"

    @classmethod
    def parse(cls, text: str) -> TreeKey:
        """The key an SSE id names; raises ValueError when no tree stream could have sent it."""
        match = _KEY.fullmatch(text)
        if match is None:
            raise ValueError(text)
        ms, seq, ulid, shift = match.groups()
        order = (int(ms), int(seq))
        if max(order) > _U64 or (shift is not None and (int(shift), 0) <= order):
            raise ValueError(text)
        return cls(order if shift is None else (int(shift), 0), ulid, order)

    def successor(self) -> TreeKey:
        """The smallest key after this one (a bound that lets this key itself pass)."""
        return TreeKey(self.first, self.ulid, (self.order[0], self.order[1] + 1))


def tree_resume_point(value: str | None) -> TreeKey | None:
    """The tree stream's Last-Event-ID (header or ``?last_event_id=``); 400 when malformed."""
    if not value:
        return None
    try:
        return TreeKey.parse(value)
    except ValueError:
        raise HTTPException(
            400,
            f"Last-Event-ID {value[:80]!r} is not a tree stream id like "
            "1700000000000-0.01HZX3A5B6C7D8E9F0G1H2J3K4",
        ) from None


@dataclass
class _Member:
    """One run the stream follows: where its stream and its children index were read to."""

    run_id: str
    shift_ms: int
    parent_id: str | None
    start: str = "-"  # the next XRANGE start
    first_read: bool = True
    had_record: bool = False
    read_ended: bool = False  # its terminal event was read (or it is gone)
    family_final: bool = False  # its index was read after its end: no child can appear
    index_score: int = 0  # the children index is read from this score on
    at_score: set[str] = field(default_factory=set)  # children seen at index_score

    @property
    def ulid(self) -> str:
        return self.run_id.rpartition(".")[2]


Message = tuple[TreeKey | None, RunEvent]  # no key: a synthetic event (no SSE id)


class TreeFollower:
    """The merge state of one tree stream: members, events read but not sent, the horizon.

    Pure state: :func:`tree_events` does the reading, this decides what goes out.
    """

    def __init__(self, root_id: str, *, after: TreeKey | None, max_runs: int) -> None:
        self.root_id = root_id
        self.after = after
        self.max_runs = max_runs
        self.members: dict[str, _Member] = {}
        self.held: list[Message] = []
        self.truncated = False
        self.progressed = False  # the last round read something new
        self.behind = False  # the last round left something unread
        self._add(root_id, 0, None).had_record = True  # the route checked it exists

    def _add(self, run_id: str, shift_ms: int, parent_id: str | None) -> _Member:
        member = _Member(run_id, shift_ms, parent_id)
        after = self.after
        if after is not None and after.first > (shift_ms, 0):
            # every key of this run below the resume point's ``first`` was sent: skip them
            member.start = f"{after.first[0]}-{after.first[1]}"
        self.members[run_id] = member
        return member

    @property
    def done(self) -> bool:
        """Every run followed ended, no child can appear, and everything read was sent."""
        return not self.held and all(m.family_final for m in self.members.values())

    def reads(self) -> tuple[list[StreamRead], list[IndexRead]]:
        """What the next round reads: each open stream, each index that may still grow."""
        streams = [
            StreamRead(m.run_id, m.start, TREE_READ_CHUNK, oldest=m.first_read)
            for m in self.members.values()
            if not m.read_ended
        ]
        room = max(0, self.max_runs - len(self.members)) + 1  # one more tells truncation
        indexes = [
            IndexRead(m.run_id, m.index_score, room + len(m.at_score))
            for m in self.members.values()
            if not m.family_final and not self.truncated
        ]
        return streams, indexes

    def apply(
        self,
        now_ms: int,
        streams: list[StreamRead],
        indexes: list[IndexRead],
        result: Round,
    ) -> list[Message]:
        """Take in one round read after the clock said ``now_ms``; the messages now due."""
        out: list[Message] = []
        self.progressed = self.behind = False
        bound = TreeKey((now_ms, 0), "", (0, 0))  # below it, every key is in this round
        for read, chunk in zip(streams, result.chunks, strict=True):
            bound = min(bound, self._take_stream(self.members[read.run_id], read, chunk, out))
        for index, entries in zip(indexes, result.entries, strict=True):
            bound = min(bound, self._take_index(self.members[index.parent_id], entries, out))
        self._settle_families()
        ready = sorted(item for item in self.held if item[0] is not None and item[0] < bound)
        self.held = [item for item in self.held if item[0] is not None and item[0] >= bound]
        return out + ready

    def _take_stream(
        self, member: _Member, read: StreamRead, chunk: StreamChunk, out: list[Message]
    ) -> TreeKey:
        """Hold the run's new events; the bound its unread rest puts on the horizon."""
        if member.first_read:
            member.first_read = False
            if (gap := self._gap(member, chunk.oldest)) is not None:
                out.append((None, gap))
        member.had_record = member.had_record or chunk.status is not None
        for event in chunk.events:
            key = TreeKey.of(event.id, member.ulid, member.shift_ms)
            if self.after is None or key > self.after:
                self.held.append((key, event))
            member.start = f"({event.id}"
            self.progressed = True
            if event.type in TERMINAL_EVENT_TYPES:
                member.read_ended = True
                break
        complete = len(chunk.events) < read.count
        if complete and chunk.status in TERMINAL_EVENT_TYPES:
            member.read_ended = True  # its terminal event lies before the resume point
        if chunk.status is None and not member.read_ended and self._gone(member):
            member.read_ended = True  # deleted or expired: nothing more will come
            out.append(
                (
                    None,
                    _synthetic(
                        member.run_id,
                        "replay_unavailable",
                        {
                            "requested_after": self.after.encode() if self.after else "0-0",
                            "oldest_available": None,
                            "reason": "the run record is gone (deleted, or expired)",
                        },
                    ),
                )
            )
        if len(chunk.events) == read.count and not member.read_ended:
            self.behind = True
            last = chunk.events[-1]
            return TreeKey.of(last.id, member.ulid, member.shift_ms).successor()
        return _UNBOUNDED

    def _gone(self, member: _Member) -> bool:
        """Whether a run without a record will never write: it had one, or cannot be made now."""
        if member.had_record:
            return True
        parent = self.members.get(member.parent_id or "")
        return parent is None or parent.family_final

    def _take_index(self, parent: _Member, entries: list[Position], out: list[Message]) -> TreeKey:
        """Follow the children an index read found; the bound the newest puts on the horizon."""
        bound = _UNBOUNDED
        for position in entries:
            if position.run_id in parent.at_score or position.run_id in self.members:
                continue
            if position.score > parent.index_score:
                parent.index_score, parent.at_score = position.score, set()
            parent.at_score.add(position.run_id)
            if len(self.members) >= self.max_runs:
                self._truncate(position.run_id, out)
                break
            # seen no earlier than its parent was: a grandchild indexed before its parent
            # was itself indexed is shifted up to the parent's point too
            shift_ms = max(position.score, parent.shift_ms)
            self._add(position.run_id, shift_ms, parent.run_id)
            self.progressed = True
            # its stream is read next round: nothing of it may be passed before then
            bound = min(bound, TreeKey((shift_ms, 0), "", (0, 0)))
        if parent.read_ended:
            parent.family_final = True  # its index was read after its terminal event
        return bound

    def _truncate(self, first_left_out: str, out: list[Message]) -> None:
        self.truncated = True
        out.append(
            (
                None,
                _synthetic(
                    self.root_id,
                    "tree_truncated",
                    {
                        "max_runs": self.max_runs,
                        "setting": "LEASEHOLD_TREE_STREAM_MAX_RUNS",
                        "first_not_followed": first_left_out,
                    },
                ),
            )
        )

    def _settle_families(self) -> None:
        """Past truncation no index is read: an ended run's family is then as final as it gets."""
        if self.truncated:
            for member in self.members.values():
                member.family_final = member.family_final or member.read_ended

    def _gap(self, member: _Member, oldest: RunEvent | None) -> RunEvent | None:
        """A ``replay_unavailable`` event when history this stream needs was trimmed."""
        if oldest is None or oldest.type == "created":
            return None
        after = self.after
        if after is not None and TreeKey.of(oldest.id, member.ulid, member.shift_ms) <= after:
            return None  # the client is past the trimmed part
        return _synthetic(
            member.run_id,
            "replay_unavailable",
            {
                "requested_after": after.encode() if after else "0-0",
                "oldest_available": oldest.id,
            },
        )


# the last message: every run followed ended; a client stops instead of reconnecting
TREE_ENDED = "tree_ended"
_UNBOUNDED = TreeKey((_U64 + 1, 0), "", (0, 0))


def _synthetic(run_id: str, kind: str, data: dict[str, object]) -> RunEvent:
    """An event this stream makes up (never stored): it has no id and moves no cursor."""
    return RunEvent(id="", run_id=run_id, type=kind, ts=datetime.now(tz=UTC), fence=0, data=data)


def encode_message(key: TreeKey | None, event: RunEvent, *, retry_ms: int | None) -> bytes:
    """One tree stream message: the tree key as ``id`` (none for synthetic events)."""
    return ServerSentEvent(
        data=event.model_dump_json(),
        event=event.type,
        id=key.encode() if key is not None else None,
        retry=retry_ms,
    ).encode()


async def tree_events(
    store: TreeStore,
    root_id: str,
    *,
    after: TreeKey | None,
    retry_ms: int,
    max_runs: int,
) -> AsyncIterator[bytes]:
    """Every event of the run and its descendants after ``after``, merged, until all ended.

    One write per round. Polls (see the module doc); raises what Redis raises.
    """
    follower = TreeFollower(root_id, after=after, max_runs=max_runs)
    hint: int | None = retry_ms
    pause = POLL_MIN_S
    failures = REDIS_BACKOFF.streak()
    SSE_SUBSCRIBERS.inc()
    try:
        while not follower.done:
            streams, indexes = follower.reads()
            try:
                now_ms = await store.server_ms()
                result = await store.read_round(streams, indexes)
            except (RedisError, OSError) as exc:
                # the 200 went out: the round is read again (reads() changed nothing)
                why = describe(exc)
                await failures.wait(exc, what="tree stream: round", why=why, logger=log)
                continue
            failures.reset()
            if messages := follower.apply(now_ms, streams, indexes, result):
                chunks = [
                    encode_message(k, e, retry_ms=hint if i == 0 else None)
                    for i, (k, e) in enumerate(messages)
                ]
                hint = None
                SSE_EVENTS_SENT.inc(len(chunks))
                yield b"".join(chunks)
            if follower.done:
                yield encode_message(None, _synthetic(root_id, TREE_ENDED, {}), retry_ms=hint)
                return
            if follower.behind:
                continue
            if follower.progressed or follower.held:
                pause = POLL_MIN_S
            else:
                pause = min(2 * pause, idle_pause_s(streams, indexes))
            await asyncio.sleep(pause)
    finally:
        SSE_SUBSCRIBERS.dec()


def idle_pause_s(streams: list[StreamRead], indexes: list[IndexRead]) -> float:
    """The longest pause between idle rounds: :data:`POLL_MAX_S`, or more for a big tree,
    so that one idle stream sends at most :data:`IDLE_COMMANDS_PER_S` commands a second."""
    # a round: TIME, then per open run HGET and XRANGE (and one more XRANGE on its first
    # read), per index that may grow a ZRANGEBYSCORE
    commands = 1 + sum(3 if read.oldest else 2 for read in streams) + len(indexes)
    return max(POLL_MAX_S, commands / IDLE_COMMANDS_PER_S)


async def follow_tree(run_id: str, state: ApiState, last_event_id: str | None) -> EventStream:
    """The tree stream's response: 404 for an unknown run, 400 for a malformed id, 503 (with
    ``Retry-After``) past LEASEHOLD_SSE_MAX_TREE_STREAMS or LEASEHOLD_SSE_MAX_FOLLOWERS."""
    after = tree_resume_point(last_event_id)
    run = await state.store.get(run_id)
    stream = tree_events(
        state.tree_streams,
        run.id,
        after=after,
        retry_ms=state.settings.sse_retry_ms,
        max_runs=state.settings.tree_stream_max_runs,
    )
    state.tree_slots.take()  # nothing that can raise between this and the response
    return event_stream_response(state, run, stream, slots=state.tree_slots)
