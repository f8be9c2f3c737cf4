"""A follower written to directly: its first read skips what its replay sent, later ones go whole.

After its first direct write a follower takes each read as one socket write with
no comparison (the feed reads in stream order); these check that this shortcut
still skips nothing, repeats nothing, counts every event once and ends the
follower at the terminal event.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.api.fanout import DirectSink
from app.api.frames import Burst, Frame, frame
from app.api.hub import Subscription
from app.api.streaming import Cursor
from app.models import RunEvent
from tests.api.test_hub import OpenChunkedResponse, SocketBytes


def event(seq: int, kind: str = "tick") -> Frame:
    """A stored event ``1700000000000-<seq>`` as the hub frames it."""
    return frame(
        RunEvent(
            id=f"1700000000000-{seq}",
            run_id="run-1",
            type=kind,
            ts=datetime.now(tz=UTC),
            fence=1,
            data={"seq": seq},
        )
    )


def direct(after: str) -> tuple[Cursor, Subscription[Frame], SocketBytes]:
    """A follower whose replay ended at ``after``, handed to the hub's direct writes."""
    socket = SocketBytes()
    cursor = Cursor(after, retry_ms=1000)
    cursor.hint = None  # the replay carried it
    subscription: Subscription[Frame] = Subscription(10)
    sink = DirectSink(OpenChunkedResponse(socket), max_buffer=1 << 20, send_timeout_s=5)  # type: ignore[arg-type]
    assert cursor.go_direct(sink, subscription)
    return cursor, subscription, socket


def test_the_first_read_skips_the_replayed_part_and_later_reads_go_whole() -> None:
    cursor, subscription, socket = direct(after="1700000000000-2")
    first = Burst([event(1), event(2), event(3)])  # 1 and 2 came with the replay
    assert subscription.offer_all(first)
    assert socket.writes == [first[2].chunk]
    assert first.sent == 1
    second = Burst([event(4), event(5)])
    assert subscription.offer_all(second)
    assert socket.writes[1] == second.chunk
    assert second.sent == 2
    assert not cursor.ended


def test_a_read_the_replay_covered_whole_writes_nothing_and_the_next_goes_out() -> None:
    _, subscription, socket = direct(after="1700000000000-5")
    assert subscription.offer_all(Burst([event(4), event(5)]))
    assert socket.writes == []
    later = Burst([event(6)])
    assert subscription.offer_all(later)
    assert socket.writes == [later.chunk]


def test_the_terminal_event_ends_a_live_follower_and_closes_its_inbox() -> None:
    cursor, subscription, socket = direct(after="1700000000000-1")
    assert subscription.offer_all(Burst([event(2)]))
    end = Burst([event(3), event(4, kind="succeeded")])
    assert not subscription.offer_all(end)
    assert socket.writes[-1] == end.chunk
    assert end.sent == 2
    assert cursor.ended
    assert subscription.dropped and subscription.direct is None
    assert subscription.queue.get_nowait() is None  # the follower's task wakes and ends
