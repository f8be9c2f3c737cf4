"""Failovers under load: a Redis Cluster with replicas, and a primary behind Sentinel.

Each test starts its own deployment (a failover changes it for good), puts runs
in flight on every queue, fails a primary over while they run, and checks what
a user relies on: every run ends terminal or explicitly parked with exactly one
terminal event, and the workers carry on by themselves (a new run on the moved
queue succeeds, served by the same worker processes).

``CLUSTER FAILOVER`` is coordinated and loses no acknowledged write; ``kill -9``
of a primary, and ``SENTINEL FAILOVER`` (which promotes first and reconfigures
the old primary after), can lose the last ones, which is what fencing is for
(README, "What a failover can do to a run").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.models import RunStatus
from app.stack.processes import Child
from tests.support.failover import (
    Deployment,
    assert_each_settled_exactly_once,
    deployment,
    kinds,
    submit,
    submit_retried,
    wait_some_running,
)
from tests.support.polling import wait_status
from tools.clusters import LocalCluster, LocalSentinel, Server, poll

pytestmark = pytest.mark.cluster

TTL_S = 1.5
RUN_S = 2.0
# with acknowledgements on, a primary left without its replica (killed, then promoted)
# waits this long per durable write: short, so the test stays quick
ACKS_ENV = {"LEASEHOLD_REPLICA_ACKS": "1", "LEASEHOLD_REPLICA_ACK_TIMEOUT_S": "0.2"}


@dataclass
class Load:
    """Runs in flight on a deployment, and the workers executing them."""

    deployed: Deployment
    workers: list[Child]
    ids: list[str]

    async def assert_recovered(self, queue: str) -> None:
        """The failover invariants, then proof that the workers reconnected on their own."""
        counts = await assert_each_settled_exactly_once(self.deployed.store, self.ids)
        print(f"outcomes after the failover: {dict(counts)}")
        after = await submit(self.deployed.store, queue)
        await wait_status(self.deployed.store, after, RunStatus.SUCCEEDED, timeout_s=60)
        assert all(worker.alive() for worker in self.workers)


@asynccontextmanager
async def in_flight(
    url: str, prefix: str, tmp_path: Path, queues: list[str], **env: str
) -> AsyncIterator[Load]:
    """Two workers serving ``queues`` on ``url``, and runs on every queue, most running."""
    async with deployment(
        url, prefix, tmp_path, lease_ttl_s=TTL_S, LEASEHOLD_QUEUES=",".join(queues), **env
    ) as deployed:
        workers = [deployed.processes.worker("--concurrency", "8") for _ in range(2)]
        store = deployed.store
        ids = [await submit_retried(store, q, seconds=RUN_S) for q in queues for _ in "abc"]
        await wait_some_running(store, ids, len(queues) * 2)
        yield Load(deployed, workers, ids)


def wait_promoted(replica: Server) -> None:
    poll(
        lambda: replica.info("replication").get("role"),
        lambda role: role == "master",
        what=f"{replica.name} to be promoted",
        timeout_s=30,
    )


async def test_cluster_failover_of_a_primary_while_runs_are_in_flight(
    replicated_cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    queues = replicated_cluster.queues_on_distinct_primaries(prefix, 3)
    async with in_flight(replicated_cluster.url, prefix, tmp_path, queues, **ACKS_ENV) as load:
        primary = replicated_cluster.primary_of(f"{prefix}:{{{queues[0]}}}:ready")
        replica = replicated_cluster.replica_of(primary)
        replica.command("CLUSTER", "FAILOVER")  # coordinated: the replica catches up first
        wait_promoted(replica)
        replicated_cluster.wait_healthy()
        await load.assert_recovered(queues[0])


async def test_kill_9_of_a_cluster_primary_while_runs_are_in_flight(
    replicated_cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    queues = replicated_cluster.queues_on_distinct_primaries(prefix, 3)
    async with in_flight(replicated_cluster.url, prefix, tmp_path, queues, **ACKS_ENV) as load:
        primary = replicated_cluster.primary_of(f"{prefix}:{{{queues[1]}}}:ready")
        replica = replicated_cluster.replica_of(primary)
        primary.kill()  # no goodbye: the replica is promoted once the others agree it failed
        wait_promoted(replica)
        replicated_cluster.wait_healthy(replicas_required=False)
        await load.assert_recovered(queues[1])


async def test_sentinel_failover_while_runs_are_in_flight(
    sentinel_group: LocalSentinel, prefix: str, tmp_path: Path
) -> None:
    queues = ["default", "mail"]
    async with in_flight(sentinel_group.url, prefix, tmp_path, queues, **ACKS_ENV) as load:
        sentinel_group.failover()
        await load.assert_recovered(queues[0])


async def test_kill_9_of_the_primary_behind_sentinel_while_runs_are_in_flight(
    sentinel_group: LocalSentinel, prefix: str, tmp_path: Path
) -> None:
    queues = ["default", "mail"]
    async with in_flight(sentinel_group.url, prefix, tmp_path, queues) as load:
        old = sentinel_group.primary()
        old.kill()
        sentinel_group.wait_new_primary(old)
        await load.assert_recovered(queues[1])


async def test_writes_a_failover_loses_are_fenced_and_the_loser_stops(
    replicated_cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    """The two losses that matter, made to happen: a lost claim and a lost terminal write.

    Replication from the primary of two queues is cut, so everything it accepts
    from then on is lost when its replica takes over:

    * ``finishing`` was claimed (and replicated) before the cut and succeeds after
      it: the new primary still has it running, with a lease nobody renews. It
      expires, the reconciler requeues it (fence+1) and it runs again: one
      terminal event in the end, the one the surviving history has.
    * ``waiting`` was created before the cut and claimed after it: the new primary
      has it queued, so it is claimed again, with the same fence number. The
      first claimant's execution must stop and write nothing.
    """
    cluster = replicated_cluster
    primary = cluster.primary_of(f"{prefix}:{{q0}}:ready")
    replica = cluster.replica_of(primary)
    first, second = cluster.queues_on(primary, prefix, 2)
    async with deployment(cluster.url, prefix, tmp_path, lease_ttl_s=TTL_S) as deployed:
        store = deployed.store
        finisher = deployed.processes.worker("--queues", first)
        finishing = await submit_retried(store, first, seconds=2.0)
        waiting = await submit_retried(store, second, seconds=4.0)
        await wait_status(store, finishing, RunStatus.RUNNING)
        cluster.wait_replicated(primary, replica)
        cluster.cut_replication(primary, replica)
        claimant = deployed.processes.worker("--queues", second)
        await wait_status(store, waiting, RunStatus.RUNNING)  # a claim only the primary has
        await wait_status(store, finishing, RunStatus.SUCCEEDED)  # an outcome only it has
        primary.kill()
        cluster.take_over(replica)
        cluster.wait_healthy(replicas_required=False)
        counts = await assert_each_settled_exactly_once(store, [finishing, waiting])
        assert counts == {"succeeded": 2}
        rerun = await kinds(store, finishing)
        assert rerun[:2] == ["created", "claimed"] and "lease_expired" in rerun
        claims = [e.fence for e in await store.read_events(waiting) if e.type == "claimed"]
        assert claims[0] == 1  # the lost claim's fence, handed out again
        assert finisher.alive() and claimant.alive()
        # the claimant heard LOST for its first execution, or claimed the run again
        # itself and stopped the first one: either way that one wrote nothing
        assert "without writing" in claimant.log(), claimant.log()
