"""The tree stream's merge order, driven against a simulated Redis with adversarial timing.

Pure logic: a model of streams and a children index whose writes interleave with
the follower's rounds (same-ms ids in several streams, a child's first events
written before its parent's index names it, full reads), and connections dropped
at random and resumed from the last SSE id. Every event must arrive exactly once.
The real-Redis, real-worker version is in tests/api/test_tree_stream.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from app.api.tree import TreeFollower, TreeKey
from app.models import RunEvent, event_id_order
from app.store.family.tree import IndexRead, Round, StreamChunk, StreamRead
from app.store.runs.positions import Position

ULIDS = "0123456789ABCDEFGHJKMNPQRSTV"


def run_id(n: int) -> str:
    return f"q{n % 3}.{'0' * 24}{ULIDS[n // 28]}{ULIDS[n % 28]}"


@dataclass
class World:
    """Streams and indexes, written one action at a time in Redis-clock order."""

    streams: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    index: dict[str, dict[str, int]] = field(default_factory=dict)
    log: list[tuple[int, str, str, str]] = field(default_factory=list)  # ms, kind, run, what
    done: int = 0

    def now_ms(self) -> int:
        return self.log[self.done][0] if self.done < len(self.log) else self.log[-1][0] + 1

    def step(self, writes: int) -> None:
        for ms, kind, run, what in self.log[self.done : self.done + writes]:
            if kind == "xadd":
                stream = self.streams.setdefault(run, [])
                seq = 0
                if stream and event_id_order(stream[-1][0])[0] == ms:
                    seq = event_id_order(stream[-1][0])[1] + 1
                stream.append((f"{ms}-{seq}", what))
            else:
                self.index.setdefault(what, {})[run] = ms
        self.done = min(len(self.log), self.done + writes)

    def read(self, streams: Sequence[StreamRead], indexes: Sequence[IndexRead]) -> Round:
        chunks = []
        for read in streams:
            entries = self.streams.get(read.run_id, [])
            if read.start == "-":
                picked = entries
            elif read.start.startswith("("):
                bound = event_id_order(read.start[1:])
                picked = [e for e in entries if event_id_order(e[0]) > bound]
            else:
                bound = event_id_order(read.start)
                picked = [e for e in entries if event_id_order(e[0]) >= bound]
            chunks.append(
                StreamChunk(
                    events=[event(read.run_id, i, kind) for i, kind in picked[: read.count]],
                    oldest=event(read.run_id, *entries[0]) if read.oldest and entries else None,
                    status=status_of(entries),
                )
            )
        found = []
        for index in indexes:
            children = sorted(
                (score, child)
                for child, score in self.index.get(index.parent_id, {}).items()
                if score >= index.min_score
            )
            found.append([Position(s, c) for s, c in children[: index.count]])
        return Round(chunks=chunks, entries=found)


def status_of(entries: list[tuple[str, str]]) -> str | None:
    if not entries:
        return None
    return "succeeded" if entries[-1][1] == "succeeded" else "running"


def event(run: str, event_id: str, kind: str) -> RunEvent:
    return RunEvent(id=event_id, run_id=run, type=kind, ts=datetime.now(tz=UTC), fence=1)


def build(rng: random.Random, *, children: int, grandchildren: int) -> World:
    """A root spawning children (and one spawning its own) in a few busy milliseconds."""
    world = World()
    actions: list[tuple[int, str, str, str]] = []
    root = run_id(0)
    ms = 1000
    actions.append((ms, "xadd", root, "created"))
    live = [root]
    family = {root: [run_id(n) for n in range(1, children + 1)]}
    family[run_id(1)] = [run_id(n) for n in range(children + 1, children + 1 + grandchildren)]
    parent_of = {c: p for p, cs in family.items() for c in cs}
    pending = [c for cs in family.values() for c in cs]
    budget = {r: rng.randint(2, 12) for r in [root, *pending]}
    indexed_at: dict[str, int] = {}
    while live:
        ms += rng.choice([0, 0, 0, 1, 2])  # many writes share a millisecond
        run = rng.choice(live)
        mine = [c for c in pending if parent_of[c] == run]
        if mine and rng.random() < 0.4:
            child = mine[0]
            pending.remove(child)
            actions.append((ms, "xadd", child, "created"))
            # the parent's index names it now or a little later (another slot, another script)
            at = ms + rng.choice([0, 0, 1, 3])
            indexed_at[run] = max(at, indexed_at.get(run, 0))
            actions.append((at, "zadd", child, run))
            live.append(child)
            continue
        if budget[run] > 0:
            budget[run] -= 1
            actions.append((ms, "xadd", run, "progress"))
            continue
        if not mine:
            # a parent ends after its spawns returned: after its index named each child
            ms = max(ms, indexed_at.get(run, 0))
            actions.append((ms, "xadd", run, "succeeded"))
            live.remove(run)
    world.log = sorted(actions, key=lambda action: action[0])  # stable: same-ms order kept
    return world


def follow(world: World, rng: random.Random, *, max_runs: int, drop: float) -> list[list[str]]:
    """Follow the tree over connections dropped at random; each connection's event keys."""
    connections: list[list[str]] = []
    after: TreeKey | None = None
    world.step(1)  # the route 404s a run that does not exist yet
    while True:
        follower = TreeFollower(run_id(0), after=after, max_runs=max_runs)
        sent: list[str] = []
        connections.append(sent)
        dropped = False
        for _ in range(100_000):
            if follower.done:
                break
            streams, indexes = follower.reads()
            now_ms = world.now_ms()
            world.step(rng.randint(0, 2))  # writes land between the clock read and the reads
            result = world.read(streams, indexes)
            for key, message in follower.apply(now_ms, streams, indexes, result):
                if key is not None:
                    sent.append(f"{message.run_id}/{message.id}")
                    after = key
            world.step(rng.randint(0, 3))
            if rng.random() < drop:
                dropped = True
                break
        else:
            pytest.fail("the follower never ended")
        if not dropped:
            return connections


@pytest.mark.parametrize("seed", range(60))
def test_every_event_arrives_exactly_once_across_dropped_connections(seed: int) -> None:
    rng = random.Random(seed)
    world = build(rng, children=3, grandchildren=2)
    connections = follow(world, rng, max_runs=100, drop=0.08)
    world.step(len(world.log))
    delivered = [item for sent in connections for item in sent]
    expected = [f"{run}/{i}" for run, entries in world.streams.items() for i, _ in entries]
    assert sorted(delivered) == sorted(expected)
    assert len(delivered) == len(set(delivered)), "an event came twice"


@pytest.mark.parametrize("seed", range(20))
def test_each_run_s_events_arrive_in_stream_order(seed: int) -> None:
    rng = random.Random(seed)
    world = build(rng, children=3, grandchildren=0)
    (sent,) = follow(world, rng, max_runs=100, drop=0.0)
    by_run: dict[str, list[tuple[int, int]]] = {}
    for item in sent:
        run, _, event_id = item.partition("/")
        by_run.setdefault(run, []).append(event_id_order(event_id))
    assert all(ids == sorted(ids) for ids in by_run.values())
    assert set(by_run) == {run_id(n) for n in range(4)}


def test_a_tree_past_the_bound_says_so_once_and_follows_the_first_found() -> None:
    rng = random.Random(7)
    world = build(rng, children=5, grandchildren=0)
    follower = TreeFollower(run_id(0), after=None, max_runs=3)
    truncations = []
    runs = set()
    while not follower.done:
        streams, indexes = follower.reads()
        now_ms = world.now_ms()
        world.step(2)
        for key, message in follower.apply(now_ms, streams, indexes, world.read(streams, indexes)):
            if key is None:
                truncations.append(message)
            else:
                runs.add(message.run_id)
    assert [m.type for m in truncations] == ["tree_truncated"]
    assert truncations[0].data["max_runs"] == 3
    assert len(runs) == 3 and run_id(0) in runs


@pytest.mark.parametrize(
    "text",
    [
        "1-0",
        "1-0.01HZX3A5B6C7D8E9F0G1H2J3K4.1",  # shifted to a point not above its own id
        "1-0.01HZX3A5B6C7D8E9F0G1H2J3KU",  # U is not Crockford base32
        "99999999999999999999-0.01HZX3A5B6C7D8E9F0G1H2J3K4",  # past 64 bits
        "1-0.01HZX3A5B6C7D8E9F0G1H2J3K4\n",
        "",
    ],
)
def test_a_malformed_tree_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        TreeKey.parse(text)


def test_a_tree_id_round_trips() -> None:
    plain = TreeKey.of("1700000000000-3", "01HZX3A5B6C7D8E9F0G1H2J3K4", 0)
    shifted = TreeKey.of("1700000000000-3", "01HZX3A5B6C7D8E9F0G1H2J3K4", 1700000000005)
    assert TreeKey.parse(plain.encode()) == plain
    assert TreeKey.parse(shifted.encode()) == shifted
    assert plain < shifted
