"""Builds and the runs pinned to them: upgrades, counts, and the unavailable-build sweep.

A run whose versioning is ``pinned`` is pinned by its first claim to the claiming
worker's build (claim.lua): from then on it waits in that build's lanes, which only
that build's workers serve. This store moves such runs to another build or to none
(``upgrade_runs``), reads what each build still holds (the queue's ``pins:<build>``
index, kept by the claim and by finalize), and tells the queued runs of a build no
live worker has why they do not start (``note_unavailable``, run by the reconciler).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from app.statuses import TERMINAL_EVENT_TYPES
from app.store.builds.bindings import (
    NOTE_UNAVAILABLE,
    UPGRADE_RUNS,
    UnavailableArgs,
    UpgradeArgs,
    UpgradeGroup,
)
from app.store.context import Store
from app.store.lua.scripts import ScriptCode

# the statuses GET /builds splits a build's pinned runs into; every other open status
# (waiting, waiting_human, reconciliation_required) is `parked`
RUNNING_STATUSES = frozenset({"running", "cancelling"})

# runs of one build read per queue to split them by status; past it the split is scaled
STATUS_SAMPLE = 1000
# ids per upgrade_runs call, and queued runs read per note_unavailable call
UPGRADE_BATCH = 500
UNAVAILABLE_READS = 2000


@dataclass
class PinnedRuns:
    """The open runs pinned to one build, by what they are doing (summed over queues)."""

    queued: int = 0
    running: int = 0
    parked: int = 0
    # true when a queue held more than STATUS_SAMPLE of them: the split is scaled from a
    # random sample (the total is exact)
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.queued + self.running + self.parked


@dataclass
class UpgradeResult:
    """What one upgrade call did: runs moved, and the others by why not."""

    upgraded: list[str] = field(default_factory=list)
    # run id -> why not: not_found, ended, not_pinned, not_matched (another build or
    # handler than asked, or on the target build already)
    refused: dict[str, str] = field(default_factory=dict)


def _refusal(code: str, status: str) -> str:
    """Why upgrade_runs left a run: not_found, ended, not_pinned or not_matched."""
    if code == ScriptCode.NOT_FOUND:
        return "not_found"
    if code == ScriptCode.INVALID:
        return "ended" if status in TERMINAL_EVENT_TYPES else "not_pinned"
    return "not_matched"


class BuildStore(Store):
    """Moves pinned runs between builds and reads what each build holds."""

    async def upgrade(
        self,
        queue: str,
        run_ids: Sequence[str],
        *,
        from_build: str = "",
        to_build: str = "",
        handler: str = "",
    ) -> UpgradeResult:
        """Move the runs (of one queue) off their build: to ``to_build``, or to none."""
        keys = self.keys(queue)
        result = UpgradeResult()
        for start in range(0, len(run_ids), UPGRADE_BATCH):
            batch = run_ids[start : start + UPGRADE_BATCH]
            args = UpgradeArgs(
                from_build,
                to_build,
                handler,
                self.events_maxlen,
                keys.wake_channel,
                [UpgradeGroup(run_id) for run_id in batch],
            )
            reply = await UPGRADE_RUNS.send(self.scripts, self.client, keys, args)
            for run_id, (code, status, _build) in zip(batch, reply.answers, strict=True):
                if code == ScriptCode.OK:
                    result.upgraded.append(run_id)
                else:
                    result.refused[run_id] = _refusal(code, status)
        return result

    async def queues_with_pins(self, queues: Sequence[str]) -> list[str]:
        """Those of ``queues`` that have open pinned runs, in one pipelined round trip."""
        if not queues:
            return []
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self.keys(queue).pinned_builds)
        found = await pipe.execute()
        return [queue for queue, exists in zip(queues, found, strict=True) if exists]

    async def pinned_builds(self, queue: str) -> set[str]:
        """The builds that have open pinned runs in ``queue``."""
        return cast(set[str], await self.client.smembers(self.keys(queue).pinned_builds))

    async def pinned_pages(self, queue: str, build_id: str, page: int) -> AsyncIterator[list[str]]:
        """The ids of ``queue``'s open runs pinned to ``build_id``, a page at a time (SSCAN:
        a run pinned throughout is seen at least once; one moved meanwhile may not be)."""
        cursor = 0
        while True:
            cursor, ids = await self.client.sscan(
                self.keys(queue).pins(build_id), cursor, count=page
            )
            if ids:
                yield cast(list[str], list(ids))
            if cursor == 0:
                return

    async def pinned_count(self, queue: str, build_id: str) -> int:
        """How many of ``queue``'s open runs are pinned to ``build_id``."""
        return int(await self.client.scard(self.keys(queue).pins(build_id)))

    async def pinned_runs(self, queue: str, build_id: str, into: PinnedRuns) -> None:
        """Add ``queue``'s open runs pinned to ``build_id`` to ``into``, by status."""
        key = self.keys(queue).pins(build_id)
        total = int(await self.client.scard(key))
        if total == 0:
            return
        ids = cast(list[str], await self.client.srandmember(key, STATUS_SAMPLE))
        pipe = self.client.pipeline(transaction=False)
        for run_id in ids:
            pipe.hget(self.keys(queue).run(run_id), "status")
        seen = Counter(status for status in await pipe.execute() if status)
        scale = total / max(1, len(ids))
        into.estimated = into.estimated or total > len(ids)
        queued = round(seen["queued"] * scale)
        running = round(sum(seen[s] for s in RUNNING_STATUSES) * scale)
        into.queued += queued
        into.running += running
        into.parked += max(0, total - queued - running)

    async def note_unavailable(self, queue: str, live_builds: Iterable[str]) -> dict[str, int]:
        """Tell ``queue``'s queued runs pinned to a build none of ``live_builds`` is why
        they wait; returns the queued runs of each such build."""
        args = UnavailableArgs(
            " ".join(sorted(set(live_builds))), self.events_maxlen, UNAVAILABLE_READS
        )
        reply = await NOTE_UNAVAILABLE.send(self.scripts, self.client, self.keys(queue), args)
        return reply.waiting

    async def waiting_on(self, queue: str, build_id: str) -> int:
        """Queued runs of ``queue`` in ``build_id``'s lanes (its ring's lanes)."""
        lanes = cast(
            list[str], await self.client.lrange(self.keys(queue).build_ready(build_id), 0, -1)
        )
        if not lanes:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for lane in lanes:
            pipe.zcard(self.keys(queue).lane(lane))
        return sum(int(n) for n in await pipe.execute())
