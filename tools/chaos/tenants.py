"""A neighbour tenant under the faults: namespaces stay apart and its quota holds.

The chaos workload runs in the ``default`` namespace. Beside it, namespace
``neighbour`` (no worker serves it) gets a queue, a ``creates_per_s`` quota and a
stream of creates well above that quota, through every API, during every fault; and
each round a run id of one namespace is read through the other. The invariants:

* ``cross_namespace_read``: a run of one namespace is never answered (200) through the
  other, whatever restarts, refusals or Redis outages happen meanwhile;
* ``cross_namespace_claim``: no worker (they all serve ``default``) ever claims a
  neighbour run: every one is still ``queued`` at the end, never leased;
* ``quota_exceeded``: the neighbour never holds more runs than its rate quota allows
  over the attack (burst + rate x elapsed, plus one burst per Redis restart, which may
  lose the bucket's last write).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import cast

import redis.asyncio as aioredis

from app.client import AsyncClient
from app.errors import ApiError
from app.httpx_import import httpx
from app.namespaces import namespace_prefix
from app.store.keys import QueueKeys
from tools.chaos.checker import Violation
from tools.chaos.faults import QUEUE

NEIGHBOUR = "neighbour"
RATE_PER_S = 2
ROUND_S = 0.2


class Neighbour:
    """The neighbour tenant's clients, what they were answered, and what they saw."""

    def __init__(self, urls: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.theirs = [AsyncClient(url, namespace=NEIGHBOUR, timeout_s=10) for url in urls]
        self.ours = [AsyncClient(url, timeout_s=10) for url in urls]
        self.created: list[str] = []
        self.answers: Counter[str] = Counter()
        self.crossed: list[str] = []
        self.started = 0.0
        self.elapsed_s = 0.0

    async def aclose(self) -> None:
        """Close every connection pool."""
        for client in [*self.theirs, *self.ours]:
            await client.aclose()

    async def start(self) -> None:
        """Declare the namespace (its quota) and its queue, before any fault."""
        admin = self.ours[0].http
        spec = {"quotas": {"creates_per_s": RATE_PER_S}}
        (await admin.put(f"/namespaces/{NEIGHBOUR}", json=spec)).raise_for_status()
        (await self.theirs[0].http.put(f"/queues/{QUEUE}")).raise_for_status()
        self.started = time.monotonic()

    async def run(self, stop: asyncio.Event, ours: Callable[[], list[str]]) -> None:
        """Create above the quota and read across namespaces until ``stop``."""
        while not stop.is_set():
            await self._create()
            await self._cross(ours())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ROUND_S)
        self.elapsed_s = time.monotonic() - self.started

    async def _create(self) -> None:
        client = self.rng.choice(self.theirs)
        try:
            run = await client.create("chaos.tick", {"seconds": 0}, queue=QUEUE)
        except ApiError as exc:
            self.answers[str(exc.status)] += 1
            return
        except httpx.TransportError:
            self.answers["transport"] += 1
            return
        self.answers["201"] += 1
        self.created.append(run.id)

    async def _cross(self, our_ids: list[str]) -> None:
        """Read a neighbour run through ``default`` and one of ours through the neighbour."""
        pairs = []
        if self.created:
            pairs.append((self.rng.choice(self.ours), self.rng.choice(self.created)))
        if our_ids:
            pairs.append((self.rng.choice(self.theirs), self.rng.choice(our_ids)))
        for client, run_id in pairs:
            try:
                response = await client.http.get(f"/runs/{run_id}")
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                self.crossed.append(run_id)

    async def check(
        self, redis: aioredis.Redis, prefix: str, redis_restarts: int
    ) -> list[Violation]:
        """The three invariants, read from Redis once everything settled."""
        found = [
            Violation("cross_namespace_read", run_id, "answered 200 through another namespace")
            for run_id in self.crossed
        ]
        keys = QueueKeys(namespace_prefix(prefix, NEIGHBOUR), QUEUE)
        stored = cast(list[str], await redis.zrange(keys.runs, 0, -1))
        pipe = redis.pipeline(transaction=False)
        for run_id in stored:
            pipe.hget(keys.run(run_id), "status")
        statuses = await pipe.execute() if stored else []
        leased = await redis.zcard(keys.leases)
        for run_id, status in zip(stored, statuses, strict=True):
            if status != "queued":
                detail = f"a neighbour run is {status}: a worker of another namespace took it"
                found.append(Violation("cross_namespace_claim", run_id, detail))
        if leased:
            found.append(Violation("cross_namespace_claim", NEIGHBOUR, f"{leased} leases held"))
        allowed = RATE_PER_S * (1 + redis_restarts) + RATE_PER_S * self.elapsed_s + 1
        if len(stored) > allowed:
            detail = f"{len(stored)} runs made in {self.elapsed_s:.0f}s at {RATE_PER_S}/s"
            found.append(Violation("quota_exceeded", NEIGHBOUR, detail))
        return found

    def figures(self) -> dict[str, int]:
        """What the neighbour was answered, for the report."""
        return {**dict(self.answers), "crossed": len(self.crossed)}
