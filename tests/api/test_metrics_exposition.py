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


CYCLES = 150


async def test_declare_scrape_undeclare_cycles_leave_the_exposition_flat(
    api: httpx.AsyncClient,
) -> None:
    """Issue 35's attack: 1,186 such cycles grew /metrics from 7.5 KB to 644 KB."""
    sizes = []
    for cycle in range(CYCLES):
        queue = f"made-up-{cycle}"
        assert (await api.put(f"/queues/{queue}")).status_code == 201
        if cycle % 10 == 0:  # a run created and deleted: the counters labelled by queue too
            created = await api.post("/runs", json={"handler": "demo.echo", "queue": queue})
            run_id = created.json()["id"]
            assert (await api.post(f"/runs/{run_id}/cancel")).status_code == 202
            assert (await api.delete(f"/runs/{run_id}")).status_code == 204
        scraped = await api.get("/metrics")
        assert f'queue="{queue}"' in scraped.text
        assert (await api.delete(f"/queues/{queue}")).status_code == 204
        sizes.append(len((await api.get("/metrics")).content))
    final = (await api.get("/metrics")).text
    assert "made-up-" not in final
    # the process's own series (GC counts, CPU seconds) move by a few digits, no more
    assert max(sizes) - min(sizes) < 512, (min(sizes), max(sizes))
