"""TLS in each clustered mode: rediss+cluster:// and rediss+sentinel:// against real servers.

Every node (and every sentinel) listens only on a TLS port with a certificate a
throwaway CA signed; the URL trusts that CA with ``ssl_ca_certs`` and carries the
passwords. A worker, the API's readiness check and the test's own store all
connect through the same URL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.models import RunStatus
from app.store.health import check_readiness
from tests.support.failover import deployment, submit
from tests.support.polling import wait_status
from tools.clusters import LocalCluster, LocalSentinel, TlsFiles

pytestmark = pytest.mark.cluster


async def runs_and_reports(url: str, prefix: str, tmp_path: Path, queues: list[str]) -> None:
    """A worker runs one run per queue, and readiness sees every node, over TLS."""
    async with deployment(
        url, prefix, tmp_path, lease_ttl_s=2.0, LEASEHOLD_QUEUES=",".join(queues)
    ) as deployed:
        deployed.processes.worker()
        for queue in queues:
            run_id = await submit(deployed.store, queue, message=queue)
            done = await wait_status(deployed.store, run_id, RunStatus.SUCCEEDED)
            assert done.output == {"message": queue}
        readiness = await check_readiness(deployed.client, deployed.store.scripts)
        assert readiness.ready, readiness.problems
        assert readiness.topology is not None
        assert any(node.role == "primary" for node in readiness.topology.nodes)


async def test_a_cluster_over_tls_with_a_password(
    tls_files: TlsFiles, prefix: str, tmp_path: Path
) -> None:
    cluster = LocalCluster(tmp_path / "cluster", primaries=3, tls=tls_files)
    try:
        cluster.start()
        assert cluster.url.startswith("rediss+cluster://")
        queues = cluster.queues_on_distinct_primaries(prefix, 3)
        await runs_and_reports(cluster.url, prefix, tmp_path, queues)
    finally:
        cluster.stop()


async def test_sentinel_over_tls_with_data_and_sentinel_passwords(
    tls_files: TlsFiles, prefix: str, tmp_path: Path
) -> None:
    group = LocalSentinel(tmp_path / "sentinel", tls=tls_files)
    try:
        group.start()
        assert group.url.startswith("rediss+sentinel://")
        await runs_and_reports(group.url, prefix, tmp_path, ["default", "mail"])
    finally:
        group.stop()
