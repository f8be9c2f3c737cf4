"""Prometheus metrics, one module so every name and label set is defined once.

The API serves :data:`API_REGISTRY` at ``GET /metrics``; a worker serves
:data:`WORKER_REGISTRY` on ``LEASEHOLD_WORKER_METRICS_PORT`` when set
(``app.telemetry.metrics_server``). Each process exposes what it observes: the API
counts creations, SSE followers and (at scrape time) queue depth; workers count claims,
outcomes, renewals, leases lost, verdicts and budget failures; reconcilers (inside
workers, or standalone) count scans and actions. prometheus-client objects are
thread-safe, so the heartbeat thread updates them directly.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

# labelled children kept by child(): queues x handlers x statuses in practice; past this
# many (a bug, or made-up labels) the cache starts over rather than grow
CHILD_CACHE_MAX = 4096
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}


def child(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, found once: for the counters a worker bumps per run.

    ``labels()`` checks the values, builds a key and takes the metric's lock on every
    call (~2-3 % of a worker's CPU at thousands of runs a second, three calls per run);
    a child, once made, is the same object for as long as nobody removes it, which
    nothing does for the per-run metrics this is used on.
    """
    key = (metric, values)
    found = _children.get(key)
    if found is None:
        if len(_children) >= CHILD_CACHE_MAX:
            _children.clear()
        found = _children[key] = metric.labels(*values)
    return cast(M, found)


# One registry per kind of process, so each exports only what it observes: with one global
# registry the API served the worker's counters (renewals, leases lost, loop lag...) as
# constant zeros, which read as "nothing wrong" on a dashboard (issue 18). A process's own
# CPU, memory and GC series go to both.
API_REGISTRY = CollectorRegistry(auto_describe=True)
WORKER_REGISTRY = CollectorRegistry(auto_describe=True)
for _registry in (API_REGISTRY, WORKER_REGISTRY):
    for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        _registry.register(_collector)

RUNS_CREATED = Counter(
    "leasehold_runs_created_total",
    "Runs created through the API.",
    ["queue", "handler"],
    registry=API_REGISTRY,
)
RETRY_OPERATIONS_RUNNING = Gauge(
    "leasehold_retry_operations_running",
    "Bulk retries (POST /runs/retry) this API process drives now; "
    "at LEASEHOLD_RETRY_OPERATIONS_MAX one more is refused with 503.",
    registry=API_REGISTRY,
)
RUNS_CLAIMED = Counter(
    "leasehold_runs_claimed_total",
    "Runs claimed by this worker.",
    ["queue", "handler"],
    registry=WORKER_REGISTRY,
)
RUNS_FINISHED = Counter(
    "leasehold_runs_finished_total",
    "Outcomes this worker wrote: succeeded, failed, cancelled, waiting_human, retry; "
    "lost when the write was fenced out.",
    ["queue", "handler", "status"],
    registry=WORKER_REGISTRY,
)
RECONCILER_SCANS = Counter(
    "leasehold_reconciler_scans_total",
    "Reconciler passes over every known queue.",
    registry=WORKER_REGISTRY,
)
SCHEDULE_FIRES = Counter(
    "leasehold_schedule_fires_total",
    "Schedule fire times reconcilers acted on: created (a run), skipped (the overlap "
    "policy), missed (the missed-fire policy), buffered (buffer_one held one), refused "
    "(Redis memory past the high-water mark: not fired, tried again on the next pass).",
    ["queue", "outcome"],
    registry=WORKER_REGISTRY,
)
RECONCILER_ACTIONS = Counter(
    "leasehold_reconciler_actions_total",
    "Expired leases acted on: orphaned, requeued, cancelled, reconciliation_required, "
    "released (a hand-off its worker never read); "
    "and expired: runs nobody claimed within their queued time-to-live.",
    ["queue", "action"],
    registry=WORKER_REGISTRY,
)
RUNS_DELETED = Counter(
    "leasehold_runs_deleted_total",
    "Finished runs deleted through the API: delete (DELETE /runs/{id}) or purge.",
    ["queue", "via"],
    registry=API_REGISTRY,
)
LEASE_RENEWALS = Counter(
    "leasehold_lease_renewals_total",
    "Leases renewed by the heartbeat.",
    ["queue"],
    registry=WORKER_REGISTRY,
)
ATTEMPT_SECONDS = Histogram(
    "leasehold_run_attempt_seconds",
    "Duration of one attempt in this worker, claim to outcome written, by how it ended; "
    "with tracing on, observations carry the attempt's trace_id as an OpenMetrics exemplar.",
    ["queue", "handler", "status"],
    buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 300, 900, 3600),
    registry=WORKER_REGISTRY,
)
RENEW_SECONDS = Histogram(
    "leasehold_lease_renew_seconds",
    "Round-trip time of one batch renewal (one per queue).",
    ["queue"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=WORKER_REGISTRY,
)
RENEWAL_FAILURES = Counter(
    "leasehold_renewal_failures_total",
    "Batch renewals that failed (Redis unreachable or erroring).",
    registry=WORKER_REGISTRY,
)
LEASES_LOST = Counter(
    "leasehold_leases_lost_total",
    "Runs this worker stopped without writing: lease_lost (fenced out) or jeopardy "
    "(no renewal before TTL minus the safety margin).",
    ["reason"],
    registry=WORKER_REGISTRY,
)
LOOP_LAG = Gauge(
    "leasehold_event_loop_lag_seconds",
    "How late the worker's event loop ran a callback (evidence, never a verdict).",
    registry=WORKER_REGISTRY,
)
VERDICTS = Counter(
    "leasehold_watchdog_verdicts_total",
    "Watchdog verdicts.",
    ["verdict", "kind"],
    registry=WORKER_REGISTRY,
)
BUDGET_FAILURES = Counter(
    "leasehold_budget_failures_total",
    "Runs failed by a budget.",
    ["code"],
    registry=WORKER_REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "leasehold_queue_depth",
    "Runs per queue: ready (waiting to be claimed), delayed (retry backoff, delayed "
    "starts, rate holds), waiting (parked on a durable sleep, signal or join), leased "
    "(held by a worker), parked (waiting_human, reconciliation_required). "
    "Measured at scrape time.",
    ["queue", "state"],
    registry=API_REGISTRY,
)
BUILD_RUNS = Gauge(
    "leasehold_build_runs",
    "Open runs pinned to each build by state (queued, running, parked; unavailable: queued "
    "with no live worker of the build), at scrape time, for the builds GET /builds lists",
    ["build", "state"],
    registry=API_REGISTRY,
)
BUILD_WORKERS = Gauge(
    "leasehold_build_workers",
    "Live workers of each build at scrape time; with leasehold_build_runs, a build whose "
    "runs are all 0 is drained and its workers can be stopped",
    ["build"],
    registry=API_REGISTRY,
)
LIVE_WORKERS = Gauge(
    "leasehold_workers",
    "Live workers (heartbeat within one lease TTL) serving each declared queue, at scrape time; "
    "0 for a queue nobody serves.",
    ["queue"],
    registry=API_REGISTRY,
)
OLDEST_QUEUED_AGE = Gauge(
    "leasehold_oldest_queued_age_seconds",
    "Age of the run at the head of the ready list, at scrape time.",
    ["queue"],
    registry=API_REGISTRY,
)
SSE_SUBSCRIBERS = Gauge(
    "leasehold_sse_subscribers", "Clients following a run in this API.", registry=API_REGISTRY
)
SSE_EVENTS_SENT = Counter(
    "leasehold_sse_events_sent_total",
    "Events sent to SSE followers by this API.",
    registry=API_REGISTRY,
)
SSE_STREAMS = Gauge(
    "leasehold_sse_streams",
    "SSE responses (run events and /activity) this API serves now.",
    registry=API_REGISTRY,
)
TREE_STREAMS = Gauge(
    "leasehold_sse_tree_streams",
    "Tree streams (GET /runs/{id}/events?include=children) this API serves now; each is "
    "also one of leasehold_sse_streams. At LEASEHOLD_SSE_MAX_TREE_STREAMS one more gets 503.",
    registry=API_REGISTRY,
)
SSE_DROPPED = Counter(
    "leasehold_sse_followers_dropped_total",
    "Followers written to directly that were dropped as too slow (they resume by id), by why: "
    "write_buffer (LEASEHOLD_SSE_WRITE_BUFFER_MAX_BYTES) or send_timeout.",
    ["why"],
    registry=API_REGISTRY,
)
SSE_REFUSED = Counter(
    "leasehold_sse_refused_total",
    "SSE requests refused with 503 at a per-process cap: followers, runs, queues or trees.",
    ["cap"],
    registry=API_REGISTRY,
)
WORKER_WRITES_REFUSED = Counter(
    "leasehold_worker_writes_refused_total",
    "Worker writes Redis refused or missed, by write (claim, finish, renewal, events, "
    "handoff, advertisement, reconcile) and reason (out_of_memory, read_only, unavailable, "
    "error); each is kept and retried, except events, which are dropped when Redis is out "
    "of memory. The log says the first at once, then one line per 10 s with a count.",
    ["write", "reason"],
    registry=WORKER_REGISTRY,
)
EVENTS_DROPPED = Counter(
    "leasehold_events_dropped_total",
    "Handler events dropped because Redis refused them for memory; the terminal event "
    "is never one of them.",
    registry=WORKER_REGISTRY,
)
REDIS_MEMORY_USED = Gauge(
    "leasehold_redis_memory_used_bytes",
    "Redis used_memory (the fullest primary in a cluster), as last read by this API.",
    registry=API_REGISTRY,
)
REDIS_MEMORY_MAX = Gauge(
    "leasehold_redis_memory_max_bytes",
    "Redis maxmemory of that node; 0 when none is configured (creates are never refused).",
    registry=API_REGISTRY,
)
QUEUE_RUNS_STORED = Gauge(
    "leasehold_queue_runs_stored",
    "Run records a queue keeps in Redis (each with its event stream), at scrape time.",
    ["queue"],
    registry=API_REGISTRY,
)
CREATES_REFUSED = Counter(
    "leasehold_creates_refused_total",
    "Creates this API refused with 503 because Redis memory was past the high-water mark.",
    registry=API_REGISTRY,
)
# rate limits, labelled by the *declared* name (a key, or a template such as crm:{tenant}),
# never by a template's instance: at most LEASEHOLD_MAX_RATE_LIMITS label values
RATE_LIMIT_WAITS = Counter(
    "leasehold_rate_limit_waits_total",
    "ctx.rate_limit takes that had to wait for their token (outcome: waited, released).",
    ["key", "outcome"],
    registry=WORKER_REGISTRY,
)
RATE_LIMIT_WAIT_SECONDS = Counter(
    "leasehold_rate_limit_wait_seconds_total",
    "Seconds handlers waited for rate-limit tokens, holding their leases.",
    ["key"],
    registry=WORKER_REGISTRY,
)
RATE_LIMIT_PUSHES = Counter(
    "leasehold_rate_limit_pushes_total",
    "Upstream 429s reported with ctx.rate_limited: each pushed the key's bucket forward.",
    ["key"],
    registry=WORKER_REGISTRY,
)
SLOTS_USED = Gauge(
    "leasehold_concurrency_slots_used",
    "Concurrency slots held, at scrape time: scope queue (every running run), handler "
    "and key (only those with a declared limit: bounded by LEASEHOLD_MAX_LIMITS), and "
    "keys (the sum over every concurrency key).",
    ["queue", "scope", "name"],
    registry=API_REGISTRY,
)
SLOTS_LIMIT = Gauge(
    "leasehold_concurrency_slots_limit",
    "Declared concurrency limits (PUT /queues/{name}/limits), same labels as "
    "leasehold_concurrency_slots_used; default_key is scope key, name '*'.",
    ["queue", "scope", "name"],
    registry=API_REGISTRY,
)
RESOURCES_WAITED_ON = Gauge(
    "leasehold_concurrency_resources_waited_on",
    "Handlers, keys and singleton keys that have queued runs waiting for a slot, at scrape time.",
    ["queue"],
    registry=API_REGISTRY,
)
HANDOFFS = Counter(
    "leasehold_handoffs_total",
    "Runs a create claimed for this idle worker and pushed to its inbox (the hand-off, "
    "LEASEHOLD_HANDOFF), started without a claim of the worker's own.",
    ["queue"],
    registry=WORKER_REGISTRY,
)
CLAIMS_THROTTLED = Counter(
    "leasehold_claims_throttled_total",
    "Lanes a claim of this worker found at a concurrency limit (handler, key, singleton) "
    "or stopped at the queue-wide limit; each blocked lane is counted once, then waits "
    "for a slot to come back without being looked at again.",
    ["queue"],
    registry=WORKER_REGISTRY,
)
SLOT_RECOUNTS = Counter(
    "leasehold_slot_recounts_total",
    "Slot counters the reconciler found disagreeing with the live leases and set right "
    "(each is also logged): nonzero means a bug or a restored snapshot.",
    ["queue"],
    registry=WORKER_REGISTRY,
)
API_KEYS_LIVE = Gauge(
    "leasehold_api_keys_live",
    "Stored API keys (POST /keys) live now, read at scrape time; the bootstrap keys "
    "(LEASEHOLD_API_KEYS) are not counted. At LEASEHOLD_MAX_API_KEYS one more create is a 409.",
    registry=API_REGISTRY,
)
AUTH_REFUSALS = Counter(
    "leasehold_auth_refusals_total",
    "Requests this API's authentication refused, by reason: unknown_key (401: no key, or "
    "one that is not, or no longer, stored: a stored key's expiry deletes it), expired "
    "(401: an expired stream token) or role (403: the key's role is too low).",
    ["reason"],
    registry=API_REGISTRY,
)
AUDIT_APPEND_FAILURES = Counter(
    "leasehold_audit_append_failures_total",
    "Operate/admin calls served whose audit entry could not be written (Redis refused or "
    "unreachable); each is also logged. Nonzero means the audit stream has gaps.",
    registry=API_REGISTRY,
)
STREAM_TOKENS_ISSUED = Counter(
    "leasehold_stream_tokens_issued_total",
    "Browser stream tokens issued (POST /runs/{id}/stream-token).",
    registry=API_REGISTRY,
)
