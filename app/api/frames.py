"""Run events in their SSE wire form, encoded once per event however many follow it.

A run followed by a thousand clients in one process would otherwise serialize
each live event a thousand times (JSON, then the SSE framing). The event feed
(:mod:`app.api.hub`) turns each event into a :class:`Frame` once, and every
follower writes the same bytes.

Messages use sse-starlette's own encoder and separator (``\\r\\n``), so a
pre-encoded message is byte for byte what the library would send. Each frame
also carries its message as one HTTP/1.1 chunk, byte for byte what uvicorn
would write for it, for the followers written to directly (:mod:`app.api.fanout`),
and the frames of one read travel as a :class:`Burst`: their chunks joined once
for all of those followers, and one tally of what was written from it, so the
sent-events counter moves once per read, not once per follower.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sse_starlette import ServerSentEvent

from app.models import TERMINAL_EVENT_TYPES, RunEvent, event_id_order


def encode(event: RunEvent, *, retry_ms: int | None = None) -> bytes:
    """One run event as an SSE message: ``id`` (omitted when empty), ``event``, ``data``."""
    return ServerSentEvent(
        data=event.model_dump_json(), event=event.type, id=event.id or None, retry=retry_ms
    ).encode()


@dataclass(frozen=True, slots=True)
class Frame:
    """A live event with what every follower needs: its position, its message, whether it ends."""

    event: RunEvent
    order: tuple[int, int]  # the stream id as a sortable pair
    message: bytes  # the SSE message, without a retry: field
    terminal: bool
    chunk: bytes  # the message as one chunk of a chunked HTTP/1.1 body


class Burst(list[Frame]):
    """The frames of one feed read, in order, as every follower written to directly gets them.

    ``chunk`` is all of their chunks, joined once however many followers write it;
    ``terminal``, whether the last one ends the run; ``sent`` tallies the events
    written from it (by :meth:`app.api.streaming.Cursor.write`), for the hub to
    count once (a follower's counter increment takes a lock: at 1,000 followers it
    cost about as much as the follower's own checks).
    """

    __slots__ = ("chunk", "sent", "terminal")

    def __init__(self, frames: Iterable[Frame]) -> None:
        super().__init__(frames)
        self.chunk = self[0].chunk if len(self) == 1 else b"".join(item.chunk for item in self)
        self.terminal = self[-1].terminal
        self.sent = 0


def chunked(message: bytes) -> bytes:
    """``message`` as one chunk of a ``Transfer-Encoding: chunked`` body, as uvicorn frames it."""
    return b"%x\r\n%b\r\n" % (len(message), message)


def frame(event: RunEvent) -> Frame:
    """Encode a stored event (it has a stream id) for fan-out."""
    message = encode(event)
    return Frame(
        event=event,
        order=event_id_order(event.id),
        message=message,
        terminal=event.type in TERMINAL_EVENT_TYPES,
        chunk=chunked(message),
    )


def gap(after: str, first: RunEvent) -> Frame:
    """A ``replay_unavailable`` frame: events after ``after`` were trimmed before ``first``.

    It takes ``first``'s place in the order: a follower that already has ``first``
    (its own replay reached it) missed nothing and skips it; any other gets it
    right before ``first``. Like every synthetic event it has no id, so it does not
    move a client's Last-Event-ID.
    """
    event = RunEvent(
        id="",
        run_id=first.run_id,
        type="replay_unavailable",
        ts=datetime.now(tz=UTC),
        fence=first.fence,
        data={"requested_after": after, "oldest_available": first.id},
    )
    message = encode(event)
    order = event_id_order(first.id)
    return Frame(event=event, order=order, message=message, terminal=False, chunk=chunked(message))
