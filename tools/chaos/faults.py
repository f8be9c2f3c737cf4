"""The faults the harness injects, one at a time, on a seeded schedule.

Each fault is what an operator would see in production, done with real
signals and real sockets:

* ``kill_worker``       ``kill -9`` of a worker holding runs; a replacement starts in
                        its slot (the reconciler must orphan or retry its runs);
* ``kill_idle_worker``  ``kill -9`` of a worker registered for a hand-off, then a burst
                        of creates while its registration lives: a create claims a run
                        for the dead worker and pushes it to an inbox nobody reads (the
                        reconciler must give it back, ``released`` reason
                        ``handoff_undelivered``, for a living worker to run);
* ``pause_worker``      SIGSTOP a worker holding runs past its lease, then SIGCONT:
                        it wakes as a stale owner whose every write must be rejected;
* ``drain_worker``      SIGTERM a worker holding runs: it finishes what it can within
                        its drain timeout, releases the rest and exits; replaced;
* ``restart_redis``     Redis stops (flushing its AOF) and starts again at once;
* ``redis_outage``      Redis is down for longer than a lease, then comes back;
* ``partition_worker``  the proxy between one worker and Redis blackholes for longer
                        than a lease, then heals (late delivery, or resets);
* ``kill_api``          ``kill -9`` of the API process most clients stream from,
                        restarted on the same port;
* ``memory_pressure``   ``CONFIG SET maxmemory`` just above Redis's ``used_memory`` for
                        about a lease, then the old limit again: creates meet the
                        API's high-water mark (503) and Redis itself refuses some
                        writes (OOM) until the limit is restored.

Each fault is recorded with its window (Redis clock-comparable wall time, ms) and
target, so the checker can name stale owners and explain detection delays.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.store.keys import QueueKeys
from tools.chaos.cluster import Cluster, WorkerSlot

QUEUE = "default"
EXIT_WAIT_S = 30.0


class FaultKind(StrEnum):
    """Every kind of fault the harness injects."""

    KILL_WORKER = "kill_worker"
    KILL_IDLE_WORKER = "kill_idle_worker"
    PAUSE_WORKER = "pause_worker"
    DRAIN_WORKER = "drain_worker"
    RESTART_REDIS = "restart_redis"
    REDIS_OUTAGE = "redis_outage"
    PARTITION_WORKER = "partition_worker"
    KILL_API = "kill_api"
    MEMORY_PRESSURE = "memory_pressure"
    # drain a worker and start it again under another build id (the same code): a deploy
    DEPLOY = "deploy"


# faults after which the target's process lives on as a stale owner (its leases taken over)
STALE_KINDS = frozenset({FaultKind.PAUSE_WORKER, FaultKind.PARTITION_WORKER})
# faults during which no reconciler can reach Redis (detection waits for it to return)
REDIS_DOWN_KINDS = frozenset({FaultKind.RESTART_REDIS, FaultKind.REDIS_OUTAGE})
# faults on Redis itself, which every process shares: one at a time, and any expiry
# under way then is explained by them
REDIS_KINDS = REDIS_DOWN_KINDS | {FaultKind.MEMORY_PRESSURE}
# Redis's headroom above used_memory during a memory_pressure fault (fraction of used):
# past the API's 0.85 high-water mark at once, and small enough that running runs'
# writes can fill it
MEMORY_HEADROOM = (0.001, 0.03)
# kill_idle_worker: how long a registration must have left to be worth killing its worker
# for (a create must reach it before it lapses), how long to look for one, and how many
# bursts of creates (of HANDOFF_BURST each) to send while it lives: a burst of 4 reaches
# the dead worker's registration even when the living ones' come before it in line, and at
# load 14 the API answers so slowly that only the first burst arrives before it lapses
HANDOFF_LEFT_MS = 250
HANDOFF_SEARCH_S = 5.0
HANDOFF_BURSTS, HANDOFF_BURST = 2, 4
HANDOFF_POLL_S = 0.05
# how long (in leases) the hand-off fault waits for Redis to answer before it gives up
# reading the dead worker's inbox (``details["inbox_unread"]``): past the longest
# redis_outage (2 leases) another lane may be injecting meanwhile
HANDOFF_INBOX_WAIT_TTLS = 4
# what a read of Redis raises while another lane's fault has it stopped
REDIS_DOWN = (RedisError, OSError)


async def _no_creates(n: int) -> None:
    raise RuntimeError("the injector was given no way to create runs")


def now_ms() -> int:
    """Wall-clock ms: the harness and Redis share this machine's clock."""
    return int(time.time() * 1000)


@dataclass
class Fault:
    """One injected fault: its kind, window and target."""

    kind: FaultKind
    started_ms: int
    ended_ms: int = 0
    target: str = ""
    owner_id: str | None = None  # the worker it hit, when it hit one
    pid: int | None = None
    held_runs: int = 0  # leases the target held when hit
    target_key: str = ""  # the slot it holds while under way (worker<i>, api<i>)
    details: dict[str, Any] = field(default_factory=dict)


class Injector:
    """Applies faults to a :class:`Cluster`; every decision comes from ``rng``."""

    def __init__(self, cluster: Cluster, redis_client: aioredis.Redis, rng: random.Random) -> None:
        self.cluster = cluster
        self.redis = redis_client
        self.rng = rng
        self.ttl_s = cluster.config.lease_ttl_s
        self.faults: list[Fault] = []
        self.stream_counts: Callable[[], dict[str, int]] = dict
        # creates n runs through the workload (tracked like its own) and returns once
        # each was answered: the kill_idle_worker fault's burst
        self.create_burst: Callable[[int], Awaitable[None]] = _no_creates
        self._held: set[str] = set()  # targets under a fault right now
        self._first: list[FaultKind] = []  # the promised kinds not yet injected
        self._actions: dict[FaultKind, Callable[[Fault], Awaitable[None]]] = {
            FaultKind.KILL_WORKER: self._kill_worker,
            FaultKind.KILL_IDLE_WORKER: self._kill_idle_worker,
            FaultKind.PAUSE_WORKER: self._pause_worker,
            FaultKind.DRAIN_WORKER: self._drain_worker,
            FaultKind.RESTART_REDIS: self._restart_redis,
            FaultKind.REDIS_OUTAGE: self._redis_outage,
            FaultKind.PARTITION_WORKER: self._partition_worker,
            FaultKind.KILL_API: self._kill_api,
            FaultKind.MEMORY_PRESSURE: self._memory_pressure,
            FaultKind.DEPLOY: self._deploy,
        }
        self._builds = 0

    async def run(
        self, kinds: list[FaultKind], *, until: float, first: list[FaultKind], lanes: int = 1
    ) -> None:
        """Inject ``first`` in order, then random ``kinds``, with random gaps, until ``until``.

        ``until`` is a ``time.monotonic()`` deadline; a fault in progress completes.
        Every fault of ``first`` is injected even past ``until``: on a loaded machine
        each fault takes longer, and a run that promised every kind must not end
        with one never tried (``first_pending`` tells the workload to keep going).
        With several ``lanes``, faults overlap (never two on the same target, never
        two on Redis at once).
        """
        queue = self._first = list(first)
        await asyncio.gather(*(self._lane(kinds, until, queue) for _ in range(lanes)))

    async def _lane(self, kinds: list[FaultKind], until: float, queue: list[FaultKind]) -> None:
        while queue or time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(1.0, 3.0))
            if not queue and time.monotonic() >= until:
                return
            kind = queue.pop(0) if queue else self.rng.choice(kinds)
            if not self._free_target(kind):
                queue.insert(0, kind)  # its target is under another fault: later
                continue
            await self.inject(kind)

    @property
    def first_pending(self) -> bool:
        """Whether a fault of ``first`` is still to be injected (the run goes on for it)."""
        return bool(self._first)

    def _free_target(self, kind: FaultKind) -> bool:
        if kind in REDIS_KINDS:
            return "redis" not in self._held
        if kind == FaultKind.KILL_API:
            return any(f"api{api.index}" not in self._held for api in self.cluster.apis)
        return any(f"worker{slot.index}" not in self._held for slot in self.cluster.workers)

    async def inject(self, kind: FaultKind) -> Fault:
        """Apply one fault and wait until it is over (the target restarted, healed...)."""
        fault = Fault(kind, now_ms())
        self.faults.append(fault)
        if kind in REDIS_KINDS:
            self._held.add("redis")
        try:
            await self._actions[kind](fault)
        finally:
            self._held.discard("redis" if kind in REDIS_KINDS else fault.target_key)
        fault.ended_ms = now_ms()
        return fault

    async def _busy_slot(self, fault: Fault) -> WorkerSlot:
        """The free worker slot whose worker holds the most leases; held until the fault ends."""
        held = await self._leases_by_owner()
        slots = [
            slot
            for slot in self.cluster.workers
            if slot.current and slot.current.alive() and f"worker{slot.index}" not in self._held
        ]
        self.rng.shuffle(slots)
        slot = max(slots, key=lambda slot: held.get(slot.current.owner_id or "", 0))
        assert slot.current is not None
        fault.target = slot.current.name
        fault.target_key = f"worker{slot.index}"
        fault.owner_id = slot.current.owner_id
        fault.pid = slot.current.pid
        fault.held_runs = held.get(slot.current.owner_id or "", 0)
        self._held.add(fault.target_key)
        return slot

    async def _leases_by_owner(self) -> dict[str, int]:
        keys = QueueKeys(self.cluster.prefix, QUEUE)
        try:
            ids = await self.redis.zrange(keys.leases, 0, -1)
            pipe = self.redis.pipeline(transaction=False)
            for run_id in ids:
                pipe.hget(keys.run(run_id), "owner_id")
            owners = await pipe.execute()
        except REDIS_DOWN:
            return {}
        counts: dict[str, int] = {}
        for owner in owners:
            if owner:
                counts[owner] = counts.get(owner, 0) + 1
        return counts

    async def _kill_worker(self, fault: Fault) -> None:
        slot = await self._busy_slot(fault)
        assert slot.current is not None
        slot.current.signal(signal.SIGKILL)
        await asyncio.to_thread(slot.current.popen.wait, EXIT_WAIT_S)
        await asyncio.to_thread(self.cluster.start_worker, slot)

    async def _kill_idle_worker(self, fault: Fault) -> None:
        """Kill a worker registered for a hand-off, then create runs while it is still
        registered; ``details["handed"]`` lists the rows (``id@fence``) found in its inbox:
        runs a create claimed for it that no worker ever read."""
        keys = QueueKeys(self.cluster.prefix, QUEUE)
        slot = await self._registered_slot(fault, keys)
        assert slot.current is not None and slot.current.owner_id is not None
        owner = slot.current.owner_id
        slot.current.signal(signal.SIGKILL)
        await asyncio.to_thread(slot.current.popen.wait, EXIT_WAIT_S)
        handed: set[str] = set()
        for _ in range(HANDOFF_BURSTS):
            left = await self._registration_left_ms(keys, owner)
            if left is None or left <= 0:  # lapsed, or Redis is down: no create would reach it
                break
            await self.create_burst(HANDOFF_BURST)
            handed |= await self._inbox_rows(keys, owner) or set()
        # until the registration lapses a create may still reach it (then its rows too)
        for _ in range(int(self.ttl_s / HANDOFF_POLL_S)):
            left = await self._registration_left_ms(keys, owner)
            if left is not None and left <= 0:
                break
            await asyncio.sleep(HANDOFF_POLL_S)
        # the rows are the checker's evidence: read them once Redis answers again
        for _ in range(int(HANDOFF_INBOX_WAIT_TTLS * self.ttl_s / HANDOFF_POLL_S)):
            rows = await self._inbox_rows(keys, owner)
            if rows is not None:
                handed |= rows
                break
            await asyncio.sleep(HANDOFF_POLL_S)
        else:
            fault.details["inbox_unread"] = True
        fault.details["handed"] = sorted(handed)
        await asyncio.to_thread(self.cluster.start_worker, slot)

    async def _registered_slot(self, fault: Fault, keys: QueueKeys) -> WorkerSlot:
        """A free worker slot whose worker is registered for a hand-off with time left,
        found within HANDOFF_SEARCH_S; else the busiest (``details["registered"]`` says)."""
        deadline = time.monotonic() + HANDOFF_SEARCH_S
        while time.monotonic() < deadline:
            try:
                now = await self._redis_now_ms()
                idle = set(
                    await self.redis.zrangebyscore(keys.handoff_idle, now + HANDOFF_LEFT_MS, "+inf")
                )
            except REDIS_DOWN:  # another lane's fault has Redis stopped: look again
                idle = set()
            slots = [
                slot
                for slot in self.cluster.workers
                if slot.current
                and slot.current.alive()
                and slot.current.owner_id in idle
                and f"worker{slot.index}" not in self._held
            ]
            if slots:
                slot = self.rng.choice(slots)
                assert slot.current is not None
                fault.target, fault.target_key = slot.current.name, f"worker{slot.index}"
                fault.owner_id, fault.pid = slot.current.owner_id, slot.current.pid
                fault.held_runs = (await self._leases_by_owner()).get(fault.owner_id or "", 0)
                self._held.add(fault.target_key)
                fault.details["registered"] = True
                return slot
            await asyncio.sleep(HANDOFF_POLL_S)
        fault.details["registered"] = False
        return await self._busy_slot(fault)

    async def _registration_left_ms(self, keys: QueueKeys, owner: str) -> int | None:
        """How long the owner's hand-off registration still lives (<= 0: none; None:
        Redis did not answer)."""
        try:
            expiry = await self.redis.zscore(keys.handoff_idle, owner)
            return -1 if expiry is None else int(expiry) - await self._redis_now_ms()
        except REDIS_DOWN:
            return None

    async def _inbox_rows(self, keys: QueueKeys, owner: str) -> set[str] | None:
        """The rows (``id@fence``) in the owner's inbox; None when Redis did not answer."""
        try:
            rows = await self.redis.lrange(keys.handoff_inbox(owner), 0, -1)
        except REDIS_DOWN:
            return None
        handed = set()
        for raw in rows:
            row = json.loads(raw)
            handed.add(f"{row[0]}@{row[1]}")
        return handed

    async def _redis_now_ms(self) -> int:
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def _pause_worker(self, fault: Fault) -> None:
        slot = await self._busy_slot(fault)
        assert slot.current is not None
        paused_s = self.ttl_s * self.rng.uniform(2.0, 3.0)
        fault.details["paused_s"] = round(paused_s, 2)
        slot.current.signal(signal.SIGSTOP)
        await asyncio.sleep(paused_s)
        slot.current.signal(signal.SIGCONT)

    async def _drain_worker(self, fault: Fault) -> None:
        slot = await self._busy_slot(fault)
        process = slot.current
        assert process is not None
        process.signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.popen.wait, EXIT_WAIT_S)
        fault.details["exit_code"] = code
        await asyncio.to_thread(self.cluster.start_worker, slot)

    async def _deploy(self, fault: Fault) -> None:
        """A rolling deploy of one worker: SIGTERM (it drains), then the same code under a
        new build id. Runs it held resume on other builds; none may drift (same code)."""
        slot = await self._busy_slot(fault)
        process = slot.current
        assert process is not None
        process.signal(signal.SIGTERM)
        fault.details["exit_code"] = await asyncio.to_thread(process.popen.wait, EXIT_WAIT_S)
        self._builds += 1
        build = f"chaos-{self._builds}"
        fault.details["build_id"] = build
        await asyncio.to_thread(self.cluster.start_worker, slot, build)

    async def _restart_redis(self, fault: Fault) -> None:
        fault.target = "redis"
        await asyncio.to_thread(self.cluster.redis.stop)
        await asyncio.to_thread(self.cluster.redis.start)

    async def _redis_outage(self, fault: Fault) -> None:
        fault.target = "redis"
        down_s = self.ttl_s * self.rng.uniform(1.2, 2.0)
        fault.details["down_s"] = round(down_s, 2)
        await asyncio.to_thread(self.cluster.redis.stop)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.cluster.redis.start)

    async def _partition_worker(self, fault: Fault) -> None:
        slot = await self._busy_slot(fault)
        cut_s = self.ttl_s * self.rng.uniform(2.0, 3.0)
        reset = self.rng.random() < 0.5
        fault.details.update(partitioned_s=round(cut_s, 2), heal="reset" if reset else "late")
        await asyncio.to_thread(slot.proxy.blackhole)
        await asyncio.sleep(cut_s)
        await asyncio.to_thread(slot.proxy.heal, reset=reset)

    async def _kill_api(self, fault: Fault) -> None:
        streams = self.stream_counts()
        slots = [api for api in self.cluster.apis if f"api{api.index}" not in self._held]
        self.rng.shuffle(slots)
        slot = max(slots, key=lambda api: streams.get(api.url, 0))
        assert slot.current is not None
        fault.target, fault.target_key = slot.current.name, f"api{slot.index}"
        self._held.add(fault.target_key)
        fault.pid = slot.current.pid
        fault.details["streams"] = streams.get(slot.url, 0)
        slot.current.signal(signal.SIGKILL)
        await asyncio.to_thread(slot.current.popen.wait, EXIT_WAIT_S)
        await asyncio.sleep(self.rng.uniform(0.2, 1.0))
        await asyncio.to_thread(self.cluster.start_api, slot)

    async def _memory_pressure(self, fault: Fault) -> None:
        """Redis's maxmemory just above what it uses, for one to two leases, then restored."""
        fault.target = "redis"
        lasting_s = self.ttl_s * self.rng.uniform(1.0, 2.0)
        headroom = self.rng.uniform(*MEMORY_HEADROOM)
        previous = str((await self.redis.config_get("maxmemory"))["maxmemory"])
        used = int((await self.redis.info("memory"))["used_memory"])
        oom_before = await self._oom_refusals()
        limit = int(used * (1 + headroom))
        fault.details.update(lasting_s=round(lasting_s, 2), used_bytes=used, maxmemory_bytes=limit)
        await self.redis.config_set("maxmemory", limit)
        try:
            await asyncio.sleep(lasting_s)
        finally:
            await self.redis.config_set("maxmemory", previous)
        fault.details["oom_refusals"] = await self._oom_refusals() - oom_before

    async def _oom_refusals(self) -> int:
        """Commands Redis refused with OOM so far (INFO errorstats)."""
        stats = await self.redis.info("errorstats")
        oom = stats.get("errorstat_OOM", {})
        return int(oom.get("count", 0)) if isinstance(oom, dict) else 0
