"""One chaos run from start to verdict: deploy, load, attack, settle, check, report.

1. Start the cluster (Redis with AOF, APIs, workers behind proxies).
2. For ``duration_s``: create runs through the API (some followed, some
   cancelled, parked ones decided by the "person", finished ones purged or
   deleted by the janitor), and inject faults one after another: first one of
   each kind in ``first_faults`` (shuffled by the seed), then kinds drawn at
   random. The activity tap records every lifecycle entry meanwhile.
3. Settle: every worker healthy again, poll Redis until every run is terminal or
   parked (a run still running then is a violation, not a reason to wait longer).
4. Check every invariant (:mod:`tools.chaos.checker`), wait, and check that no
   terminal run changed meanwhile.
5. Report (:mod:`tools.chaos.report`) and stop every process, whatever happened.

Randomness comes from ``seed`` alone (separate streams for the workload and the
faults). Timing on a loaded machine is not reproducible, so the same seed gives
the same plan of runs and faults, not the same interleaving.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis

from app.models.read import QueueLimits
from app.store.keys import QueueKeys
from app.store.redis.connection import async_client
from tools.chaos import checker, family, figures, flow, handoffs, promises, rates, schedules
from tools.chaos.checker import Snapshot, Violation
from tools.chaos.cluster import Cluster, ClusterConfig
from tools.chaos.faults import QUEUE, REDIS_DOWN_KINDS, STALE_KINDS, FaultKind, Injector, now_ms
from tools.chaos.janitor import Janitor
from tools.chaos.report import ChaosReport
from tools.chaos.rerunner import Rerunner
from tools.chaos.tap import ActivityTap
from tools.chaos.tenants import Neighbour
from tools.chaos.upgrader import Upgrader
from tools.chaos.workload import Api, Workload

SETTLE_POLL_S = 0.5
FOLLOWERS_GRACE_S = 20.0


@dataclass(frozen=True)
class ChaosConfig:
    """What to run, for how long, and with which faults."""

    duration_s: float
    seed: int
    work_dir: Path
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    fault_kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    # injected first, once each, in a seeded order: the CI run needs every kind
    first_faults: tuple[FaultKind, ...] = tuple(FaultKind)
    rate_per_s: float = 2.5
    # faults under way at once (on distinct targets; one on Redis at a time)
    lanes: int = 1
    settle_timeout_s: float = 120.0

    @property
    def recheck_after_s(self) -> float:
        """Wait before re-reading terminal runs: long enough for a lease to expire and be seen."""
        return 2 * self.cluster.lease_ttl_s + self.cluster.reconcile_interval_s


async def run_chaos(config: ChaosConfig) -> ChaosReport:
    """Deploy, attack, check; returns the report (violations included, never raised)."""
    cluster = Cluster(config.cluster, work_dir=config.work_dir, prefix=f"ch{secrets.token_hex(3)}")
    try:
        await asyncio.to_thread(cluster.start)
        redis_client = async_client(cluster.redis_url)
        await rates.declare(redis_client, cluster.prefix)
        api = Api(cluster.api_urls, random.Random(f"{config.seed}-api"))
        neighbour = Neighbour(cluster.api_urls, random.Random(f"{config.seed}-neighbour"))
        try:
            chaos = ChaosRun(config, cluster, redis_client, api, neighbour)
            await chaos.attack()
            return await chaos.verdict()
        finally:
            await neighbour.aclose()
            await api.aclose()
            await redis_client.aclose()
    finally:
        await asyncio.to_thread(cluster.stop)


class ChaosRun:
    """One run's moving parts: the workload, the injector, and the clock they share."""

    def __init__(
        self,
        config: ChaosConfig,
        cluster: Cluster,
        redis_client: aioredis.Redis,
        api: Api,
        neighbour: Neighbour,
    ) -> None:
        self.config = config
        self.neighbour = neighbour
        self.cluster = cluster
        self.redis = redis_client
        self.started = time.monotonic()
        self.started_ms = now_ms()
        self.workload = Workload(
            api,
            random.Random(f"{config.seed}-workload"),
            side_dir=cluster.side_dir,
            ttl_s=config.cluster.lease_ttl_s,
            rate_per_s=config.rate_per_s,
        )
        self.janitor = Janitor(api, random.Random(f"{config.seed}-janitor"), self.workload.runs)
        self.upgrader = Upgrader(api)
        self.rerunner = Rerunner(api, random.Random(f"{config.seed}-rerunner"), self.workload.runs)
        self.tap = ActivityTap(redis_client, cluster.prefix, QUEUE)
        self.fault_rng = random.Random(f"{config.seed}-faults")
        self.injector = Injector(cluster, redis_client, self.fault_rng)
        self.injector.stream_counts = self.workload.streams_by_api
        self.injector.create_burst = self.workload.create_burst
        self._stop_tap = asyncio.Event()
        self._tap: asyncio.Task[None] | None = None
        self.returns_compared: Counter[str] = Counter()

    async def attack(self) -> None:
        """Drive the workload and inject faults for ``duration_s``."""
        limits = QueueLimits(default_key=flow.KEY_LIMIT)
        await self.workload.api.call(lambda client: client.set_limits(QUEUE, limits))
        await schedules.start(self.workload.api)  # every reconciler fires it, under the faults
        await self.neighbour.start()  # another tenant beside the workload, over its quota
        first = list(self.config.first_faults)
        self.fault_rng.shuffle(first)
        deadline = self.started + self.config.duration_s
        stop_person = asyncio.Event()
        person = asyncio.create_task(self.workload.person(stop_person))
        janitor = asyncio.create_task(self.janitor.run(stop_person))
        upgrader = asyncio.create_task(self.upgrader.run(stop_person))
        rerunner = asyncio.create_task(self.rerunner.run(stop_person))
        ours = lambda: [t.run_id for t in self.workload.runs[-50:] if t.run_id]  # noqa: E731
        neighbour = asyncio.create_task(self.neighbour.run(stop_person, ours))
        self._tap = asyncio.create_task(self.tap.follow(self._stop_tap))
        await asyncio.gather(
            self.workload.create_until(deadline, lambda: self.injector.first_pending),
            self.injector.run(
                list(self.config.fault_kinds), until=deadline, first=first, lanes=self.config.lanes
            ),
        )
        stop_person.set()
        await asyncio.gather(person, janitor, rerunner, neighbour, upgrader)
        await schedules.stop(self.workload.api)  # its runs settle like the others

    async def verdict(self) -> ChaosReport:
        """Settle, check every invariant, re-check terminal runs later, and report."""
        settled = await self._settle()
        await self.workload.finish_followers(FOLLOWERS_GRACE_S)
        self._stop_tap.set()
        if self._tap is not None:
            await self._tap
        await self.tap.read_new()  # Redis is up and everything settled: the last entries
        violations = self._check(settled) + await self._check_promises(settled)
        await asyncio.sleep(self.config.recheck_after_s)
        later = await checker.take_snapshot(self.redis, self.cluster.prefix)
        violations += checker.check_stable(settled, later)
        return self._report(settled, violations)

    async def _settle(self) -> Snapshot:
        """Poll until every run is settled (or the timeout); returns the last snapshot."""
        deadline = time.monotonic() + self.config.settle_timeout_s
        while True:
            snapshot = await checker.take_snapshot(self.redis, self.cluster.prefix)
            runs = self.workload.runs
            created = all(t.run_id is not None or t.error is not None for t in runs)
            if (created and not checker.check_settled(snapshot)) or time.monotonic() > deadline:
                return snapshot
            await self.upgrader.sweep()  # the deploys' stranded pinned runs, as an operator would
            await asyncio.sleep(SETTLE_POLL_S)

    def _check(self, snapshot: Snapshot) -> list[Violation]:
        gone = self._gone(snapshot)
        violations = checker.check_runs_known(
            snapshot,
            self.workload.runs,
            frozenset(gone.deleted | gone.maybe_deleted | gone.vanished),
            schedules.scheduled_ids(snapshot) | family.child_ids(snapshot),
        )
        violations += checker.check_settled(snapshot)
        violations += checker.check_parked_hold_nothing(snapshot)
        violations += checker.check_waiting_index(snapshot)
        violations += checker.check_no_drift(snapshot)
        violations += checker.check_pinned_builds(snapshot)
        stale_owners = {
            fault.owner_id
            for fault in self.injector.faults
            if fault.kind in STALE_KINDS and fault.owner_id
        }
        for run in snapshot.runs.values():
            violations += checker.check_stream(run)
            violations += checker.check_stale_writes(run, stale_owners)
        created = [t.run_id for t in self.workload.runs if t.run_id]
        effect_violations, _ = checker.check_effects(created, self.cluster.side_dir)
        violations += effect_violations
        for follow in self.workload.follows:
            violations += checker.check_follow(follow, snapshot.runs.get(follow.run_id))
        violations += flow.check_key_limits(snapshot)
        restarted = any(fault.kind in REDIS_DOWN_KINDS for fault in self.injector.faults)
        logs = {f"{p.name}#{i}": p.log() for i, p in enumerate(self.cluster.all_processes())}
        violations += flow.check_no_recount(logs, restarted)
        return violations + _check_alive(self.cluster)

    def _gone(self, snapshot: Snapshot) -> promises.Gone:
        return promises.account_for_missing(snapshot, self.workload.runs, self.janitor, self.tap)

    async def _check_promises(self, snapshot: Snapshot) -> list[Violation]:
        """Issue 12/13's invariants: answers, returned outputs, cancels, deletions."""
        gone = self._gone(snapshot)
        violations = promises.check_gone(gone, self.workload.follows)
        violations += promises.check_reruns(snapshot, self.rerunner.answered, gone)
        violations += promises.check_answers(self.workload.api.answers, self.janitor)
        ttl_ms = int(self.config.cluster.lease_ttl_s * 1000)
        pressure = [
            (fault.started_ms, fault.ended_ms + ttl_ms)
            for fault in self.injector.faults
            if fault.kind == FaultKind.MEMORY_PRESSURE
        ]
        side_dir = self.cluster.side_dir
        returned, self.returns_compared = promises.check_returns(snapshot, side_dir, pressure)
        violations += returned
        violations += promises.check_cancels(self.workload.runs, snapshot, self.tap)
        violations += await family.check_families(
            self.redis,
            self.cluster.prefix,
            snapshot,
            lambda run_id: promises.may_be_deleted(run_id, self.janitor, self.tap),
        )
        violations += await flow.check_slots_returned(
            self.redis, self.cluster.prefix, QUEUE, snapshot
        )
        violations += promises.check_rate_limit(rates.read_grants(side_dir))
        faults = self.injector.faults
        violations += handoffs.check_handoffs(snapshot, faults, side_dir)
        violations += await handoffs.check_inboxes(self.redis, self.cluster.prefix, QUEUE, faults)
        violations += await schedules.check(self.redis, self.cluster.prefix, snapshot)
        restarts = sum(fault.kind in REDIS_DOWN_KINDS for fault in self.injector.faults)
        violations += await self.neighbour.check(self.redis, self.cluster.prefix, restarts)
        resurrected = await self._resurrected(list(self.janitor.deleted))
        return violations + promises.check_deleted(self.janitor.deleted, self.tap, resurrected)

    async def _resurrected(self, run_ids: list[str]) -> list[str]:
        """The deleted runs any of whose keys (record, events, effects) exists now."""
        keys = QueueKeys(self.cluster.prefix, QUEUE)
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.exists(keys.run(run_id), keys.events(run_id), keys.effects(run_id))
        counts = await pipe.execute() if run_ids else []
        return [run_id for run_id, n in zip(run_ids, counts, strict=True) if n]

    def _report(self, snapshot: Snapshot, violations: list[Violation]) -> ChaosReport:
        cluster_config = self.config.cluster
        faults = self.injector.faults
        workers = self.cluster.worker_processes()
        side_dir = self.cluster.side_dir
        created = [t.run_id for t in self.workload.runs if t.run_id]
        _, effect_counts = checker.check_effects(created, side_dir)
        return ChaosReport(
            seed=self.config.seed,
            duration_s=self.config.duration_s,
            started_ms=self.started_ms,
            elapsed_s=round(time.monotonic() - self.started, 1),
            lanes=self.config.lanes,
            cluster=cluster_config,
            snapshot=snapshot,
            faults=faults,
            violations=violations,
            detection={
                **figures.detection_figures(
                    figures.detections(snapshot),
                    faults,
                    ttl_s=cluster_config.lease_ttl_s,
                    interval_s=cluster_config.reconcile_interval_s,
                ),
                "unexplained": figures.unexplained(
                    figures.detections(snapshot), faults, ttl_s=cluster_config.lease_ttl_s
                ),
            },
            takeovers=figures.takeovers(snapshot),
            stale=figures.stale_figures(snapshot, faults, workers),
            logs=figures.log_figures(workers),
            past_lease=figures.past_lease(snapshot, faults, side_dir),
            effects=dict(effect_counts),
            workload=self.workload,
            api_retries=self.workload.api.retries,
            janitor=self.janitor,
            gone=self._gone(snapshot),
            tap=self.tap,
            returns_compared=self.returns_compared,
            reruns=self.rerunner.outcomes,
            handoffs=handoffs.handoff_figures(faults),
            tenants=self.neighbour.figures(),
            builds={
                "deploys": sum(fault.kind == FaultKind.DEPLOY for fault in faults),
                "runs_across_builds": checker.runs_across_builds(snapshot),
                "pinned_runs": sum(
                    run.fields.get("versioning") == "pinned" for run in snapshot.runs.values()
                ),
                "upgraded": self.upgrader.upgraded,
            },
        )


def _check_alive(cluster: Cluster) -> list[Violation]:
    """Only the harness ends processes: one that died on its own is a crash."""
    found = []
    for slot in [*cluster.workers, *cluster.apis]:
        process = slot.current
        if process is not None and not process.alive():
            tail = process.log()[-2000:]
            detail = f"exit {process.popen.returncode}: {tail}"
            found.append(Violation("process_died", process.name, detail))
    return found
