"""The re-run workload: an operator re-running what failed while faults land.

Every :data:`PERIOD_S` (seeded jitter) the rerunner looks at a few runs the harness
created and ``POST /runs/{id}/retry``\\ s each one that ended ``failed``,
``orphaned``, ``cancelled`` or ``expired`` (once per run), with the idempotency key
``chaos.<the run's ULID>``, through :meth:`Api.call`: a call that fails in transit or
with a 5xx is sent again, with the same key, to a random API. Each new run joins the
tracked runs (so every invariant of a created run holds for it too), and every id an
answer named is kept, for :func:`tools.chaos.promises.check_reruns`:

* ``rerun_forked``: two answers for the same run (and key) named different new runs;
* ``rerun_link_broken``: a stored re-run's ``retry_of`` is not the run it re-ran, or a
  stored run's ``retried_by`` names a stored run that does not name it back.

A re-run's effects are judged by :func:`tools.chaos.checker.check_effects` across
the runs of a chain: a re-run keeps its first run's effect keys, so a key a
non-idempotent effect ran under twice, in any runs, is a repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field, replace

import httpx

from app.client import ApiError
from app.models import Run
from tools.chaos.workload import Api, Tracked

PERIOD_S = 2.0
LOOKS_PER_ROUND = (2, 6)
RERUNNABLE = frozenset({"failed", "orphaned", "cancelled", "expired"})


@dataclass
class Rerunner:
    """Re-runs ended runs through the API; keeps every new run id each answer named."""

    api: Api
    rng: random.Random
    runs: list[Tracked]
    answered: dict[str, set[str]] = field(default_factory=dict)  # old run id -> new ids
    outcomes: Counter[str] = field(default_factory=Counter)

    async def run(self, stop: asyncio.Event) -> None:
        """Re-run a few ended runs every :data:`PERIOD_S` or so until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.rng.uniform(0.5, 1.5) * PERIOD_S)
            if stop.is_set():
                return
            for _ in range(self.rng.randint(*LOOKS_PER_ROUND)):
                await self.rerun_one()

    async def rerun_one(self) -> None:
        """Look at one created run nobody re-ran yet; re-run it if it ended badly."""
        candidates = [t for t in self.runs if t.run_id and t.run_id not in self.answered]
        if not candidates:
            return
        tracked = self.rng.choice(candidates)
        run_id = tracked.run_id
        assert run_id is not None
        key = f"chaos.{run_id.rsplit('.', 1)[1]}"
        try:
            run = await self.api.call(lambda client: client.get(run_id))
            if run.status.value not in RERUNNABLE:
                return
            new = await self._retry(run_id, key)
        except (ApiError, httpx.TransportError) as exc:
            self._refused(exc)  # deleted meanwhile (404), re-run by nobody else (409), ...
            return
        self.answered[run_id] = {new.id}
        self.outcomes["reruns"] += 1
        # the re-run is a created run like any other; nobody follows or cancels it
        plan = replace(tracked.plan, follow=None, cancel_after_s=None)
        self.runs.append(Tracked(plan, key, run_id=new.id))
        try:  # a client that sends it again (to any API) must get the same new run
            self.answered[run_id].add((await self._retry(run_id, key)).id)
        except (ApiError, httpx.TransportError) as exc:
            self._refused(exc)

    async def _retry(self, run_id: str, key: str) -> Run:
        return await self.api.call(lambda client: client.retry(run_id, idempotency_key=key))

    def _refused(self, exc: Exception) -> None:
        status = exc.status if isinstance(exc, ApiError) else "unanswered"
        self.outcomes[f"rerun_{status}"] += 1
