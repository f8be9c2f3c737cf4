"""The purge/delete workload: an operator cleaning up while faults land.

Every :data:`PERIOD_S` (seeded jitter) the janitor sends one ``POST /runs/purge``
(a small ``limit``, ``finished_before`` a moment ago, sometimes one terminal
``status``) and ``DELETE /runs/{id}`` for a few runs the harness created, picked
at random whatever their state: the ones not finished yet must be refused 409
and left alone. Runs an SSE follower is still reading are not picked for a
DELETE (a purge may still take one: the follower's 404 is then accounted for).

Each call is sent once, to a random API, and its answer kept: the ids a purge
answered and the runs a DELETE answered 204 are *deleted* (with the time of the
answer); a call whose answer never came (an API killed, Redis away) may or may
not have deleted what it looked at, so its window is kept as *unanswered* and a
run that vanished inside one is accounted for, and counted, rather than blamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from app.client import ApiError
from app.models import TERMINAL_STATUSES
from tools.chaos.workload import Api, Tracked

PERIOD_S = 4.0
PURGE_LIMIT = (2, 12)
# only runs that finished at least this long ago are purged: a follower that just
# got the terminal event usually hangs up first
PURGE_AGE_S = 1.0
DELETES_PER_ROUND = (0, 2)


@dataclass(frozen=True)
class Unanswered:
    """A purge or delete whose answer was lost: it may have deleted what it matched."""

    started_ms: int
    ended_ms: int
    run_id: str | None = None  # a DELETE's run; None for a purge
    finished_before_ms: int | None = None
    status: str | None = None


@dataclass
class Janitor:
    """Purges and deletes through the API; keeps what each answer said."""

    api: Api
    rng: random.Random
    runs: list[Tracked]
    deleted: dict[str, int] = field(default_factory=dict)  # run id -> ms of the answer
    unanswered: list[Unanswered] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    refused: list[str] = field(default_factory=list)  # DELETEs answered 409: not finished
    errors: list[str] = field(default_factory=list)  # 4xx answers to well-formed calls

    async def run(self, stop: asyncio.Event) -> None:
        """Clean up every :data:`PERIOD_S` or so until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.rng.uniform(0.5, 1.5) * PERIOD_S)
            if stop.is_set():
                return
            await self.purge()
            for _ in range(self.rng.randint(*DELETES_PER_ROUND)):
                await self.delete_one()

    async def purge(self) -> None:
        """One purge batch of runs that finished a moment ago."""
        client = self.api.clients[self.rng.choice(self.api.urls)]
        before = datetime.now(UTC) - timedelta(seconds=PURGE_AGE_S)
        status = self.rng.choice([None, *sorted(s.value for s in TERMINAL_STATUSES)])
        filters: dict[str, object] = {
            "limit": self.rng.randint(*PURGE_LIMIT),
            "finished_before": before.isoformat(),
        }
        if status is not None:
            filters["status"] = status
        started = _now_ms()
        try:
            result = await client.purge(**filters)
        except (httpx.TransportError, ApiError) as exc:
            self._lost(exc, "purge", Unanswered(started, _now_ms(), None, _ms(before), status))
            return
        answered = _now_ms()
        for run_id in result.ids:
            self.deleted[run_id] = answered
        self.outcomes["purges"] += 1
        self.outcomes["purged"] += result.deleted

    async def delete_one(self) -> None:
        """DELETE a random created run nobody is following: 204 if it had ended, else 409."""
        candidates = [
            t
            for t in self.runs
            if t.run_id and t.run_id not in self.deleted and (t.follow is None or t.follow.done)
        ]
        if not candidates:
            return
        run_id = self.rng.choice(candidates).run_id
        assert run_id is not None
        client = self.api.clients[self.rng.choice(self.api.urls)]
        started = _now_ms()
        try:
            await client.delete(run_id)
        except ApiError as exc:
            if exc.status == 409:
                self.outcomes["delete_refused_409"] += 1
                self.refused.append(run_id)
                return
            if exc.status == 404:
                self.outcomes["delete_404"] += 1  # gone already: accounted for at the end
                return
            self._lost(exc, "delete", Unanswered(started, _now_ms(), run_id))
            return
        except httpx.TransportError as exc:
            self._lost(exc, "delete", Unanswered(started, _now_ms(), run_id))
            return
        self.deleted[run_id] = _now_ms()
        self.outcomes["deleted_204"] += 1

    def _lost(self, exc: Exception, what: str, window: Unanswered) -> None:
        if isinstance(exc, ApiError) and exc.status < 500:
            self.errors.append(f"{what}: {exc}")  # reported: a well-formed call was refused
            return
        self.unanswered.append(window)
        self.outcomes[f"{what}_unanswered"] += 1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
