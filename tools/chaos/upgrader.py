"""The deploy operator: moves runs pinned to a build nobody runs any more.

A ``deploy`` fault restarts a worker under a new build id; once no live worker has the
old build, the runs pinned to it (the workload pins a share of its runs) wait in its
lanes, each with a ``build_unavailable`` wait event, as they must. An operator then
moves them on, which is what this does every :data:`PERIOD_S` and while the harness
waits for the runs to settle: ``POST /builds/{id}/upgrade`` for every build
``GET /builds`` counts unavailable runs for. The checker's ``pinned_elsewhere``
invariant holds the pinning to what these upgrades say.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx

from app.client import ApiError, AsyncClient
from app.models.builds import UpgradeSummary
from tools.chaos.workload import Api

PERIOD_S = 2.0


def upgrade_of(build_id: str) -> Callable[[AsyncClient], Awaitable[UpgradeSummary]]:
    """The call that moves every run pinned to ``build_id`` to no build."""
    return lambda client: client.upgrade_build(build_id)


class Upgrader:
    """Upgrades the runs of builds that have none of their workers left."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.upgraded = 0
        self.calls = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every PERIOD_S until ``stop`` is set."""
        while not stop.is_set():
            await self.sweep()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PERIOD_S)

    async def sweep(self) -> None:
        """One look at GET /builds and an upgrade of each build with unavailable runs.

        A call lost to a fault is tried at the next sweep (an upgrade is idempotent).
        """
        try:
            builds = await self.api.call(lambda client: client.builds())
            for build in builds:
                if build.unavailable:
                    summary = await self.api.call(upgrade_of(build.build_id))
                    self.calls += 1
                    self.upgraded += summary.upgraded
        except (httpx.HTTPError, ApiError):
            return
