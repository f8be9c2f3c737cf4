"""Following a run's events over SSE, for both clients: resumed after a drop, each event once.

``events(run_id)`` resumes by itself with ``Last-Event-ID`` after a dropped connection or
a 502/503/504 answer (:func:`_resumable`), waiting as :class:`_Cursor` says, so the
caller sees every event exactly once, ending with the terminal one.
"""

from __future__ import annotations

import logging

# first: httpx without its command-line client (rich, pygments, click), before httpx_sse
from app.httpx_import import httpx

# isort: split
from httpx_sse import ServerSentEvent

from app.errors import ApiError
from app.models import TERMINAL_EVENT_TYPES, RunEvent
from app.retry import API_BACKOFF

# a stream is silent between events; keep-alive comments arrive every 15 s by default
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
# answers that mean "not now" rather than "no": a follower waits and resumes
TRANSIENT_STATUS = frozenset({502, 503, 504})

log = logging.getLogger(__name__)


def _events_request(
    run_id: str, cursor: str | None, tree: bool = False
) -> tuple[str, dict[str, str]]:
    path = f"/runs/{run_id}/events" + ("?include=children" if tree else "")
    return path, ({"Last-Event-ID": cursor} if cursor else {})


def _event(message: ServerSentEvent) -> RunEvent:
    return RunEvent.model_validate_json(message.data)


# the tree stream's last message: every run of the tree ended (app/api/tree.py)
TREE_ENDED = "tree_ended"


def _resumable(exc: httpx.TransportError | ApiError, reconnect: bool) -> bool:
    """Whether a follow that broke this way resumes (with Last-Event-ID, after a backoff).

    A dropped connection does, and so does an API that answers "not now" (502, 503,
    504: Redis briefly unreachable, a proxy in front of a restarting API): the run
    goes on meanwhile, and giving up would lose its outcome. Any other error status
    (404 unknown run, 400 bad id) is an answer, and is raised.
    """
    if not reconnect:
        return False
    return not isinstance(exc, ApiError) or exc.status in TRANSIENT_STATUS


class _Cursor:
    """Where a resumable follow is: the last stream id seen, whether it ended, its reconnects.

    Reconnect delays follow :data:`~app.retry.API_BACKOFF` with full jitter, so the
    followers an API restart cut off come back spread out, not in one wave; an
    event received starts the next outage's backoff from the beginning.
    """

    def __init__(self, run_id: str, last_event_id: str | None, tree: bool = False) -> None:
        self.run_id = run_id
        self.last_event_id = last_event_id
        self.tree = tree
        self.ended = False
        self._reconnects = API_BACKOFF.streak()

    def advance(self, message: ServerSentEvent) -> RunEvent:
        """The message's event; past it. A tree stream resumes from the SSE id (a tree key)."""
        event = _event(message)
        if self.tree:
            self.last_event_id = message.id or self.last_event_id
            self.ended = event.type == TREE_ENDED
        else:
            self.last_event_id = event.id or self.last_event_id
            self.ended = event.type in TERMINAL_EVENT_TYPES
        self._reconnects.reset()
        return event

    def reconnect_delay_s(self, exc: httpx.TransportError | ApiError | None) -> float:
        """How long to wait before resuming (logged); ``exc`` None: the stream just ended."""
        what = f"following {self.run_id} (from {self.last_event_id or 'the start'})"
        if exc is None:
            return self._reconnects.next_delay_s()
        return self._reconnects.failed(exc, what=what, logger=log, level=logging.INFO)
