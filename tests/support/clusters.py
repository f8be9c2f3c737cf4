"""Fixtures for the Redis Cluster and Sentinel tests (the deployments: :mod:`tools.clusters`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.clusters import LocalCluster, LocalSentinel, TlsFiles, missing_binaries


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-primary cluster without replicas, shared by the session's cluster tests."""
    reason = missing_binaries()
    if reason:
        pytest.skip(reason)
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), primaries=3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 primaries with one replica each, for one test: failovers change it for good."""
    reason = missing_binaries()
    if reason:
        pytest.skip(reason)
    cluster = LocalCluster(tmp_path / "cluster", primaries=3, replicas=1)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[LocalSentinel]:
    """Primary, replica and three sentinels for one test."""
    reason = missing_binaries()
    if reason:
        pytest.skip(reason)
    group = LocalSentinel(tmp_path / "sentinel")
    try:
        yield group.start()
    finally:
        group.stop()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A CA and a server certificate for 127.0.0.1, shared by the session's TLS tests."""
    reason = missing_binaries()
    if reason:
        pytest.skip(reason)
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: TLS deployment tests skipped")
    return TlsFiles.make(tmp_path_factory.mktemp("tls"))
