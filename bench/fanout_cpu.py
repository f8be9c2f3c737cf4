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

With ``--sockets`` the followers' transports are real: uvloop transports of
loopback TCP connections whose other ends a forked reader process drains (on
core 1, this process on core 0). That is the API's whole cost of a delivery
without the worker, Redis or HTTP around it, split into user and system CPU
(``os.times``: the system part is the kernel's send), beside the same events
written with a bare ``socket.send`` per connection: the floor any code pays.

    .venv/bin/python -m bench.fanout_cpu                  # 1,000 followers x 300 events, best of 7
    .venv/bin/python -m bench.fanout_cpu --followers 10000 --events 50
    .venv/bin/python -m bench.fanout_cpu --sockets --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import time
from datetime import UTC, datetime
from functools import partial
from types import SimpleNamespace
from typing import Any

import uvloop

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
        sink = DirectSink(open_response(), max_buffer=1 << 20, send_timeout_s=10)
        followers.add(direct_follower(sink))
    return followers


def direct_follower(sink: DirectSink) -> Subscription[Frame]:
    """One follower past its replay, written to directly through ``sink``."""
    subscription: Subscription[Frame] = Subscription(100)
    cursor = Cursor(START_ID, retry_ms=1000)
    cursor.hint = None  # the replay carried it
    if hasattr(cursor, "go_direct"):
        cursor.go_direct(sink, subscription)
    else:  # a checkout before the Burst (A/B against 34e39c5)
        subscription.go_direct(partial(cursor.write, sink))  # type: ignore[arg-type]
    return subscription


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


GAP_S = 0.002  # between two events written to real sockets: the reader drains each
READ_BYTES = 1 << 16


class FlowProtocol(asyncio.Protocol):
    """A connection's flow control as uvicorn keeps it: paused while its buffer is full."""

    write_paused = False

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """It drained below the low-water mark."""
        self.write_paused = False


def drain(port: int, count: int, ready: int) -> None:
    """The forked reader: ``count`` connections to ``port``, read until each is closed."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    poll = select.epoll()
    for conn in conns:
        conn.setblocking(False)
        poll.register(conn.fileno(), select.EPOLLIN)
    os.write(ready, b"x")
    open_fds = {conn.fileno() for conn in conns}
    while open_fds:
        for fd, _ in poll.poll():
            if not os.read(fd, READ_BYTES):
                poll.unregister(fd)
                open_fds.discard(fd)
    os._exit(0)


async def socket_run(followers: int, events: int) -> dict[str, dict[str, float]]:
    """User and system CPU per follower-event over real sockets: the fan-out, then bare sends."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=followers)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        drain(listener.getsockname()[1], followers, ready_w)
    conns = [listener.accept()[0] for _ in range(followers)]
    os.read(ready_r, 1)
    loop = asyncio.get_running_loop()
    opened = [await loop.connect_accepted_socket(FlowProtocol, conn) for conn in conns]
    subscribers: set[Subscription[Frame]] = set()
    for transport, protocol in opened:
        cycle = SimpleNamespace(
            transport=transport,
            flow=protocol,
            response_started=True,
            chunked_encoding=True,
            response_complete=False,
            disconnected=False,
        )
        subscribers.add(direct_follower(DirectSink(cycle, max_buffer=1 << 20, send_timeout_s=10)))
    reads = [tick(seq) for seq in range(events)]
    result: dict[str, dict[str, float]] = {}
    start = os.times()
    for frames in reads:
        hub.fan_out_frames(subscribers, frames)
        await asyncio.sleep(GAP_S)
    result["fanout"] = per_delivery(start, os.times(), followers * events)
    start = os.times()
    for frames in reads:
        for conn in conns:
            conn.send(frames[0].chunk)
        await asyncio.sleep(GAP_S)
    result["bare_send"] = per_delivery(start, os.times(), followers * events)
    for transport, _ in opened:
        transport.close()
    await asyncio.sleep(GAP_S)
    await asyncio.to_thread(os.waitpid, pid, 0)
    listener.close()
    return result


def per_delivery(start: Any, end: Any, deliveries: int) -> dict[str, float]:
    """µs of user, system and total CPU per delivery between two ``os.times()``."""
    user = (end.user - start.user) / deliveries * 1e6
    system = (end.system - start.system) / deliveries * 1e6
    return {"user": round(user, 3), "system": round(system, 3), "total": round(user + system, 3)}


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
    parser.add_argument(
        "--sockets", action="store_true", help="real loopback TCP transports, a reader on core 1"
    )
    args = parser.parse_args(argv)
    load = harness.load_average()
    if args.sockets:
        main_sockets(args, load)
        return
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


def main_sockets(args: argparse.Namespace, load: tuple[float, float, float]) -> None:
    """``--sockets``: each repetition on fresh connections; every one printed and recorded."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    runs = [uvloop.run(socket_run(args.followers, args.events)) for _ in range(args.repeat)]
    harness.record(
        {
            "benchmark": "fanout_cpu_sockets",
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "label": args.label,
            "load_at_start": load,
            "followers": args.followers,
            "events": args.events,
            "us_per_follower_event": runs,
        }
    )
    print(f"{args.followers} followers x {args.events} events on loopback TCP (load {load[0]:.2f})")
    for run in runs:
        print(
            "  "
            + "; ".join(
                f"{what}: user {r['user']:.2f} + system {r['system']:.2f} = {r['total']:.2f} us"
                for what, r in run.items()
            )
        )


if __name__ == "__main__":
    main()
