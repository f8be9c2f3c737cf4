"""The API's /metrics exports what the API observes, never a worker's counters as zeros."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.test_metrics import API_METRICS, WORKER_METRICS

# what only a worker (or its reconciler) observes, beyond the families test_metrics checks
WORKER_ONLY = WORKER_METRICS | {
    "leasehold_run_attempt_seconds",
    "leasehold_worker_writes_refused",
    "leasehold_events_dropped",
}


async def test_api_metrics_have_no_worker_only_family(api: httpx.AsyncClient) -> None:
    response = await api.get("/metrics")
    assert response.status_code == 200
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert names >= API_METRICS
    assert sorted(names & WORKER_ONLY) == []
    assert "process_cpu_seconds" in names  # the process's own series are still there
