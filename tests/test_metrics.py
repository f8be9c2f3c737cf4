"""/metrics on the API and on workers: every metric is there, and values move with runs."""

from __future__ import annotations

import signal

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from app.client import AsyncClient
from app.models import RunStatus
from app.stack.embedded import free_port
from app.telemetry import metrics
from tests.support.polling import eventually
from tests.support.processes import Processes

API_METRICS = {
    "leasehold_runs_created",
    "leasehold_runs_deleted",
    "leasehold_queue_depth",
    "leasehold_oldest_queued_age_seconds",
    "leasehold_sse_subscribers",
    "leasehold_sse_events_sent",
    "leasehold_retry_operations_running",
}
WORKER_METRICS = {
    "leasehold_runs_claimed",
    "leasehold_runs_finished",
    "leasehold_reconciler_scans",
    "leasehold_reconciler_actions",
    "leasehold_lease_renewals",
    "leasehold_lease_renew_seconds",
    "leasehold_renewal_failures",
    "leasehold_leases_lost",
    "leasehold_event_loop_lag_seconds",
    "leasehold_watchdog_verdicts",
    "leasehold_budget_failures",
}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(url: str) -> Samples:
    """Every sample as {(name, sorted labels): value}; a family with no sample yet
    appears under its name with no labels (its HELP line is enough to be exposed)."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(url)).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault((f"family:{family.name}", ()), 0.0)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def families(samples: Samples) -> set[str]:
    return {name.removeprefix("family:") for name, _ in samples if name.startswith("family:")}


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


async def test_metrics_are_exposed_and_move_when_runs_are_created_finished_and_orphaned(
    processes: Processes,
) -> None:
    _, url = processes.api()
    ports = [free_port(), free_port()]
    victim = processes.worker(LEASEHOLD_WORKER_METRICS_PORT=str(ports[0]))
    processes.worker(LEASEHOLD_WORKER_METRICS_PORT=str(ports[1]), LEASEHOLD_QUEUES="other")
    survivor_metrics = f"http://127.0.0.1:{ports[1]}/metrics"
    async with AsyncClient(url) as client:
        before = await scrape(f"{url}/metrics")
        echo = await client.create("demo.echo", {"message": "m"})
        events = [event async for event in client.events(echo.id)]
        assert events[-1].type == "succeeded"
        await client.create(
            "demo.agent",
            {
                "tools": [],
                "model": {"first_token_s": 5},
                "first_progress_s": 0.3,
            },
        )
        long = await client.create("demo.sleep", {"seconds": 60})
        await eventually(
            lambda: client.get(long.id),
            until=lambda run: run.status == RunStatus.RUNNING,
            what="running",
        )
        victim_samples = await eventually(
            lambda: scrape(f"http://127.0.0.1:{ports[0]}/metrics"),
            until=lambda s: (
                value(s, "leasehold_budget_failures_total") >= 1
                and value(s, "leasehold_lease_renewals_total") >= 1
            ),
            what="the worker's counters",
        )
        victim.signal(signal.SIGKILL)
        await eventually(
            lambda: client.get(long.id),
            until=lambda run: run.status == RunStatus.ORPHANED,
            what="orphaned",
        )
        after = await scrape(f"{url}/metrics")
    survivor = await eventually(
        lambda: scrape(survivor_metrics),
        until=lambda s: value(s, "leasehold_reconciler_actions_total", action="orphaned") >= 1,
        what="the survivor's reconciler to count the orphan",
    )
    assert families(after) >= API_METRICS
    assert families(victim_samples) >= WORKER_METRICS
    created = value(after, "leasehold_runs_created_total", queue="default")
    assert created - value(before, "leasehold_runs_created_total", queue="default") == 3
    assert value(after, "leasehold_sse_events_sent_total") >= 3
    assert value(after, "leasehold_queue_depth", queue="default", state="leased") == 0
    assert value(victim_samples, "leasehold_runs_finished_total", status="succeeded") >= 1
    assert value(victim_samples, "leasehold_runs_claimed_total", handler="demo.echo") == 1
    assert (
        value(victim_samples, "leasehold_budget_failures_total", code="first_progress_timeout") == 1
    )
    assert value(victim_samples, "leasehold_lease_renew_seconds_count") >= 1
    assert value(survivor, "leasehold_reconciler_scans_total") >= 1


async def test_live_workers_per_queue_count_who_serves_it_and_drop_when_a_worker_dies(
    processes: Processes,
) -> None:
    """What the NoWorkers / WorkersLost alerts read: 0 on a queue nobody serves,
    and a killed worker leaves the count within its advertisement's TTL."""
    _, url = processes.api(LEASEHOLD_QUEUES="default,unserved")
    victim = processes.worker(LEASEHOLD_QUEUES="default")
    processes.worker(LEASEHOLD_QUEUES="default")
    metrics = f"{url}/metrics"
    both = await eventually(
        lambda: scrape(metrics),
        until=lambda s: value(s, "leasehold_workers", queue="default") == 2,
        what="two workers on default",
    )
    assert ("leasehold_workers", (("queue", "unserved"),)) in both
    assert value(both, "leasehold_workers", queue="unserved") == 0
    victim.signal(signal.SIGKILL)
    after = await eventually(
        lambda: scrape(metrics),
        until=lambda s: value(s, "leasehold_workers", queue="default") == 1,
        what="the killed worker to leave the count",
    )
    assert value(after, "leasehold_workers", queue="unserved") == 0


def test_a_cached_child_counts_into_the_same_series_as_labels() -> None:
    registry = CollectorRegistry()
    counter = Counter("t_child_total", "test", ["queue", "handler"], registry=registry)
    metrics.child(counter, "q", "h").inc()
    metrics.child(counter, "q", "h").inc(2)
    counter.labels("q", "h").inc()
    assert metrics.child(counter, "q", "h") is counter.labels("q", "h")
    assert registry.get_sample_value("t_child_total", {"queue": "q", "handler": "h"}) == 4


def test_the_child_cache_starts_over_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "CHILD_CACHE_MAX", 3)
    monkeypatch.setattr(metrics, "_children", {})
    counter = Counter("t_bound_total", "test", ["k"], registry=CollectorRegistry())
    for value in "abcdefg":
        metrics.child(counter, value).inc()
        assert len(metrics._children) <= 3
    assert metrics.child(counter, "a") is counter.labels("a")
