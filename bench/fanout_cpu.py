"""``python -m bench.fanout_cpu``: the API's own CPU to hand one live event to N direct followers.

:mod:`bench.sse` measures delivery end to end, which on a shared 2-core machine
mostly measures who else is running. This measures the part the fan-out code
owns, in one process: N followers in direct mode (:mod:`app.api.fanout`), each
a real :class:`~app.api.streaming.Cursor` and :class:`~app.api.fanout.DirectSink`
on a transport whose ``write`` keeps nothing (so the kernel's loopback send,
the same for any code, is left out), and M events fanned out through
:func:`app.api.hub.fan_out_frames`, the hub's own step for each read. Reported: the best of
``--repeat`` runs, as µs of CPU per follower per event (``time.process_time``:
time the process was not given a core does not count), with the load average.

    .venv/bin/python -m bench.fanout_cpu                  # 1,000 followers x 300 events, best of 7
    .venv/bin/python -m bench.fanout_cpu --followers 10000 --events 50
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from functools import partial
from types import SimpleNamespace

from app.api import hub
from app.api.fanout import DirectSink
from app.api.frames import Frame, frame
from app.api.hub import Subscription
from app.api.streaming import Cursor
from app.models import RunEvent
from bench import harness

START_ID = "1700000000000-0"


class NullSocket:
    """A transport that takes every write and keeps nothing, never paused."""

    write_paused = False

    def write(self, data: bytes) -> None:
        """Take the bytes (the kernel's send is what this leaves out)."""

    def is_closing(self) -> bool:
        """Never closing."""
        return False

    def get_write_buffer_size(self) -> int:
        """Nothing unsent."""
        return 0


def open_response() -> SimpleNamespace:
    """A uvicorn cycle whose chunked 200 is out and still open, on a :class:`NullSocket`."""
    socket = NullSocket()
    return SimpleNamespace(
        transport=socket,
        flow=socket,
        response_started=True,
        chunked_encoding=True,
        response_complete=False,
        disconnected=False,
    )


def direct_followers(count: int) -> set[Subscription[Frame]]:
    """``count`` followers past their replay, each written to directly."""
    followers: set[Subscription[Frame]] = set()
    for _ in range(count):
        subscription: Subscription[Frame] = Subscription(100)
        cursor = Cursor(START_ID, retry_ms=1000)
        cursor.hint = None  # the replay carried it
        sink = DirectSink(open_response(), max_buffer=1 << 20, send_timeout_s=10)
        if hasattr(cursor, "go_direct"):
            cursor.go_direct(sink, subscription)
        else:  # a checkout before the Burst (A/B against 34e39c5)
            subscription.go_direct(partial(cursor.write, sink))  # type: ignore[arg-type]
        followers.add(subscription)
    return followers


def tick(seq: int) -> list[Frame]:
    """One read's frames: one ``tick`` event, encoded once as the hub does."""
    event = RunEvent(
        id=f"1700000000001-{seq}",
        run_id="bench-fanout",
        type="tick",
        ts=datetime.now(tz=UTC),
        fence=1,
        data={"seq": seq, "t": time.time()},
    )
    return [frame(event)]


def one_run(followers: int, events: int) -> float:
    """CPU seconds to fan ``events`` reads out to ``followers`` direct followers."""
    subscribers = direct_followers(followers)
    reads = [tick(seq) for seq in range(events)]
    # the hub's own step for one read (before the Burst: fan_out_all itself)
    deliver = getattr(hub, "fan_out_frames", hub.fan_out_all)
    start = time.process_time()
    for frames in reads:
        deliver(subscribers, frames)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    """Measure, print, record."""
    parser = argparse.ArgumentParser(prog="python -m bench.fanout_cpu", description=__doc__)
    parser.add_argument("--followers", type=int, default=1000)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    load = harness.load_average()
    runs = [one_run(args.followers, args.events) for _ in range(args.repeat)]
    per = sorted(cpu / (args.followers * args.events) * 1e6 for cpu in runs)
    result = {
        "benchmark": "fanout_cpu",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "label": args.label,
        "load_at_start": load,
        "followers": args.followers,
        "events": args.events,
        "us_per_follower_event": {"best": round(per[0], 3), "median": round(per[len(per) // 2], 3)},
    }
    harness.record(result)
    print(
        f"{args.followers} direct followers x {args.events} events: best {per[0]:.2f}, "
        f"median {per[len(per) // 2]:.2f} us CPU per follower per event (load {load[0]:.2f})"
    )


if __name__ == "__main__":
    main()
