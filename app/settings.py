"""Every knob Leasehold has, read once from the environment (prefix ``LEASEHOLD_``).

This is the only module that reads the environment (through :mod:`app.environment`,
which also gives ``runs get`` the API's address without this model when nothing else
is set). Durations are seconds as floats (``LEASE_TTL_S=0.5`` is valid: tests and
demos use sub-second leases); lists are comma-separated (``LEASEHOLD_QUEUES=default,
mail``). An invalid value is reported by :func:`load_settings` as one line naming the
variable, and the CLI exits with status 2.

The environment is read by :func:`_from_environment`, which reads it exactly as
pydantic-settings' ``EnvSettingsSource`` did for this class (prefix, any case, JSON for
the ``dict`` settings, ``__`` for one key of them; ``tests/test_settings.py`` holds the
two side by side), without importing pydantic-settings: its sources, python-dotenv and
the asyncio it imports are ~25-45 ms of every worker's and ``runs get``'s start on a
quiet core (issue 19 aim 2, BENCHMARKS.md).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from app.environment import DEFAULT_API_HOST, DEFAULT_API_PORT, client_api_url, variables
from app.errors import ConfigurationError
from app.models import QUEUE_NAME_PATTERN
from app.redis_url import parse_redis_url

ENV_PREFIX = "LEASEHOLD_"
_QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)
# what an HTTP client can send in an Authorization header without escaping
API_KEY_PATTERN = r"^[A-Za-z0-9._~+/=-]{16,256}$"
_API_KEY = re.compile(API_KEY_PATTERN)
# the longest any run is kept or may wait (10 years): bounds what becomes a PEXPIRE/ZADD
# in Lua, whose numbers are exact only to 2^53 and whose retention spec takes 15 digits
MAX_KEEP_S = 10 * 365 * 24 * 3600.0
# a listening address: IPv4, IPv6 (hex and colons) or a DNS name, nothing else
_HOST = re.compile(r"[A-Za-z0-9.:-]{1,253}")

# settings whose values may be credentials: an error names them but never echoes them
_SECRET_FIELD = re.compile(r"key|url|password|secret|token", re.IGNORECASE)
# the demo's handlers and its fake model route: a client of the demo can burn a worker's CPU
# and hold connections, so it is on only where LEASEHOLD_HANDLERS names it (`leasehold up`)
DEMO_HANDLERS = "app.demo"
# Waits that bound a stream or a connection: an endless one ("inf") is the hang they exist
# to prevent, so they are finite and at most an hour (a pool wait at most a minute: a
# request that waits longer for a connection should have been told 503 long ago).
WAIT_MAX_S = 3600.0
# worker timings (drain, intervals, leases, backoff): finite, at most an hour or a day
HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
POOL_WAIT_MAX_S = 60.0
# host names that only a client on this machine can send (a rebinding page never does)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

# the settings whose value is a Python container: JSON in the environment (see NoDecode)
_CONTAINERS = (list, dict, set, frozenset, tuple)
# the separator of a ``dict`` setting's key in a variable's name (OP_LEASE_S__MODEL_CALL)
NESTED_DELIMITER = "__"


class NoDecode:
    """Marks a list setting whose variable is taken as written (``a,b``), not as JSON."""


class SettingsError(ValueError):
    """A variable that is not the JSON its setting needs; not a validation error."""


CommaList = Annotated[list[str], NoDecode]


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseModel):
    """Validated configuration shared by the API, workers, reconciler and CLI.

    ``Settings(**values)`` reads the ``LEASEHOLD_*`` environment; a value given
    here wins over its variable (a ``dict`` setting's keys are merged).
    """

    # what pydantic-settings' BaseSettings configured: defaults validated too
    model_config = ConfigDict(
        extra="ignore", frozen=True, validate_default=True, arbitrary_types_allowed=True
    )

    def __init__(self, **values: Any) -> None:
        super().__init__(**_merged(_from_environment(type(self).model_fields), values))

    redis_url: str | None = Field(
        default=None,
        description="Redis to use; unset means the one `leasehold up` embedded, else localhost. "
        "redis:// or rediss:// for one node, redis+cluster://host:port,host:port for Redis "
        "Cluster, redis+sentinel://host:port,host:port/service_name for Sentinel",
    )
    replica_acks: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Replicas that must acknowledge (Redis WAIT) each create, claim, terminal "
        "write, checkpoint and effect record before a worker or client acts on it; 0 means "
        "asynchronous replication only",
    )
    replica_ack_timeout_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Longest wait for REPLICA_ACKS; past it the write stands and is logged "
        "as under-replicated",
    )
    memory_high_water: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description="Fraction of Redis maxmemory past which the API refuses creates (503 + "
        "Retry-After); the rest is headroom for running work to write its outcome",
    )
    memory_check_interval_s: float = Field(
        default=1.0,
        ge=0.05,
        le=60,
        description="How long an API process trusts its last reading of Redis memory (INFO "
        "memory) before a create reads it again",
    )
    prefix: str = Field(
        default="lh",
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="First part of every Redis key, so several deployments can share one Redis",
    )
    queues: CommaList = Field(
        default_factory=lambda: ["default"],
        min_length=1,
        description="Queues a worker claims from, and queues this process declares: runs "
        "may be created only on declared queues (comma-separated)",
    )
    max_queues: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Most queues PUT /queues/{name} may declare (else 409); listing and "
        "/metrics cost one read per declared queue",
    )
    max_rate_limits: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most rate-limit keys and templates PUT /rate-limits/{key} may declare "
        "(else 409); GET /rate-limits reads one bucket per declared key",
    )
    rate_limit_max_wait_s: float = Field(
        default=60.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="Longest ctx.rate_limit waits for a token holding its lease; a later "
        "token releases the run until then instead, without spending an attempt",
    )
    lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Run lease TTL: how long a silent executor is presumed alive (detection only)",
    )
    reconcile_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=HOUR_S,
        allow_inf_nan=False,
        description="How often reconcilers scan for expired leases; unset means TTL/3",
    )
    lease_safety_margin_s: float | None = Field(
        default=None,
        ge=0,
        description="A worker that cannot renew stops its runs this long before the TTL ends; "
        "unset means TTL/6",
    )
    concurrency: int = Field(
        default=16, ge=1, le=100_000, description="Runs one worker process executes at once"
    )
    claim_batch_max: int = Field(
        default=64, ge=1, le=1000, description="Most runs a worker claims in one round trip"
    )
    prefetch_max: int = Field(
        # off by default: with it on, test_rate_limits' three workers sometimes saw one
        # take every run of a short queue (2 of 6 runs at load 7-9, 0 of 4 with it off)
        default=0,
        ge=0,
        le=100_000,
        description="Most runs a worker holds leased beyond its concurrency, claimed while "
        "the current ones run; only as many as would start within 50 ms at the recent run "
        "duration (0: none)",
    )
    round_trips_in_flight: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Round trips (outcomes + a claim) a worker keeps in flight per queue; "
        "each claims at most its share of the concurrency, so Redis finishes and leases one "
        "share while the worker runs another (1: one at a time, the two take turns)",
    )
    handoff: bool = Field(
        default=True,
        description="Direct hand-off: an idle worker registers, and a create claims the run "
        "for it in the same script (claim_runs' serving code) and pushes it to the worker's "
        "inbox, without the wake message and the claim's round trip",
    )
    handlers: CommaList = Field(
        default_factory=list,
        description="Modules imported at start to register handlers (comma-separated); "
        "none by default: a worker without handlers exits 2. `leasehold up` adds the demo's "
        "(app.demo), which also serves /demo/model",
    )
    drain_timeout_s: float = Field(
        default=30.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="On SIGTERM, how long running runs may finish before being released",
    )
    retention_succeeded_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a succeeded run (record, events, effects, idempotency key) is kept",
    )
    retention_failed_s: float = Field(
        default=30 * 24 * 3600.0, gt=0, le=MAX_KEEP_S, description="How long a failed run is kept"
    )
    retention_cancelled_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, le=MAX_KEEP_S, description="How long a cancelled run is kept"
    )
    retention_orphaned_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long an orphaned run is kept",
    )
    retention_expired_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a run that expired unclaimed (queued_ttl_s) is kept",
    )
    retention_max_s: float = Field(
        default=365 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="Longest retention_s a create request may ask for (else 422)",
    )
    queued_ttl_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="How long a run may wait unclaimed before it ends `expired`",
    )
    queued_ttl_max_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        description="Longest queued_ttl_s a create request may ask for (else 422)",
    )
    start_max_ahead_s: float = Field(
        default=365 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Furthest ahead a create's run_at / delay_s may put a run's start "
        "(else 422): a delayed run is held in Redis until then",
    )
    priority_aging_step_s: float = Field(
        default=1.0,
        ge=0,
        le=HOUR_S,
        description="Aging of priorities: a run is passed only by runs of priority p "
        "higher enqueued less than p x this after it (0: strict priority, no aging)",
    )
    max_limits: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most entries (handlers + keys) PUT /queues/{name}/limits may declare",
    )
    queue_top_keys: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="How many concurrency keys GET /queues/{name} shows (the busiest)",
    )
    schedule_max: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most schedules that may exist (POST /schedules past it: 409); each "
        "reconciler reads every queue's due ones each tick",
    )
    schedule_tick_s: float = Field(
        default=1.0,
        ge=0.05,
        le=HOUR_S,
        allow_inf_nan=False,
        description="How often every reconciler looks for due schedule fires (a fire starts "
        "within about this of its time)",
    )
    schedule_interval_min_s: float = Field(
        default=1.0,
        ge=0.05,
        le=DAY_S,
        allow_inf_nan=False,
        description="Shortest interval_s a schedule may have (else 422)",
    )
    schedule_grace_s: float = Field(
        default=2.0,
        gt=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="A fire found up to this late is on time; older ones are missed fires, "
        "which the schedule's missed policy (skip, latest, all) decides",
    )
    schedule_catchup_window_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Default catch-up window: how old a missed fire may be and still run "
        "(missed=latest or all)",
    )
    schedule_catchup_window_max_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Longest catchup_window_s a schedule may ask for (else 422)",
    )
    schedule_fires_per_tick_max: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Most fires of one schedule one reconciler tick materializes (missed=all "
        "catches up over several ticks)",
    )
    schedule_backfill_max_fires: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most fire times one POST /schedules/{id}/backfill may cover (else 422)",
    )
    purge_batch_max: int = Field(
        default=1000,
        ge=1,
        le=10_000,
        description="Most runs one POST /runs/purge deletes (its `limit` may not exceed it)",
    )
    retry_batch_size: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Runs a bulk retry (POST /runs/retry) re-runs per step; its progress is "
        "saved after each step",
    )
    retry_operation_max_runs: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most runs one bulk retry may re-run (its `limit`; more: 422)",
    )
    retry_operations_max: int = Field(
        default=4,
        ge=1,
        le=100,
        description="Bulk retries one API process drives at once (more: 503 with Retry-After)",
    )
    operation_retention_s: float = Field(
        default=604_800.0,
        gt=0,
        le=30 * DAY_S,
        allow_inf_nan=False,
        description="How long a bulk retry's record (filter, progress) is kept after its last step",
    )
    operation_empty_retention_s: float = Field(
        default=3_600.0,
        gt=0,
        le=30 * DAY_S,
        allow_inf_nan=False,
        description="How long the record of a bulk retry that re-ran nothing is kept (at most "
        "LEASEHOLD_OPERATION_RETENTION_S): requests that match nothing cannot pile up for a week",
    )
    batch_max_items: int = Field(
        default=1000,
        ge=1,
        le=10_000,
        description="Most runs one POST /runs/batch creates (more: 413, nothing written)",
    )
    max_input_bytes: int = Field(
        default=1_048_576, ge=64, description="Largest run input POST /runs accepts (else 413)"
    )
    max_event_bytes: int = Field(
        default=65_536, ge=64, description="Largest event payload a handler may emit"
    )
    max_checkpoint_bytes: int = Field(
        default=1_048_576,
        ge=64,
        description="Largest state a handler may checkpoint, and largest effect result it "
        "may record (JSON bytes); larger raises CheckpointTooLarge / InvalidEffectResult",
    )
    events_maxlen: int = Field(
        default=10_000, ge=10, description="Events kept per run stream (approximate trim)"
    )
    max_wait_s: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        le=MAX_KEEP_S,
        allow_inf_nan=False,
        description="Longest durable wait a handler may ask for (ctx.sleep, sleep_until, "
        "wait_for_signal's timeout; else InvalidWait): a parked run is kept in Redis till then",
    )
    max_waits_per_run: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most durable waits (and pending signal names) one run records; one more "
        "raises InvalidWait: a handler replays its waits from the top on every wake",
    )
    max_signal_bytes: int = Field(
        default=65_536,
        ge=64,
        le=16 * 1_048_576,
        description="Largest payload POST /runs/{id}/signals/{name} accepts (JSON bytes; else 413)",
    )
    max_pending_signals: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="Most signals a run holds that no wait has taken yet (its inbox); one more "
        "is refused with 429 and nothing written",
    )
    max_children_per_run: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most children one run may spawn (ctx.spawn); one more raises SpawnRefused "
        "in the handler and creates nothing: the parent's index and outcomes live in one slot",
    )
    outbox_sweep_s: float = Field(
        default=0.25,
        gt=0,
        le=60,
        allow_inf_nan=False,
        description="How often every reconciler delivers what the queues' outboxes hold: a "
        "child's end to its parent (wakes its join), a parent's end to its children",
    )
    max_run_depth: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="Deepest a spawned run may sit below its root (a top-level run is 0); a "
        "deeper spawn raises SpawnRefused, so a run that spawns itself cannot fork-bomb",
    )
    default_max_attempts: int = Field(
        default=1, ge=1, le=1000, description="Attempts a run gets when its request names none"
    )
    default_on_lease_expired: Literal["orphan", "retry"] = Field(
        default="orphan",
        description="What the reconciler does with an expired run when its request names "
        "nothing: orphan (terminal) or retry (requeue while attempts remain)",
    )
    retry_backoff_s: float = Field(
        default=1.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="First delay before a retryable failure runs again",
    )
    retry_backoff_max_s: float = Field(
        default=60.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="Cap of the exponential retry delay",
    )
    reconciler_enabled: bool = Field(
        default=True, description="Run a reconciler inside every worker"
    )
    idle_wake_s: float = Field(
        default=5.0,
        gt=0,
        le=HOUR_S,
        allow_inf_nan=False,
        description="Safety-net claim interval of an idle worker, for a missed pub/sub wake-up",
    )
    worker_event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="The worker's event loop: uvloop (the standard one where it is not installed)",
    )
    op_default_lease_s: float = Field(
        default=30.0,
        gt=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="Operation lease when neither the call nor OP_LEASE_S names one for its kind",
    )
    op_lease_s: dict[str, float] = Field(
        default_factory=dict,
        description="Operation lease per kind: LEASEHOLD_OP_LEASE_S__MODEL_CALL=30",
    )
    op_first_progress_s: dict[str, float] = Field(
        default_factory=dict,
        description="Time-to-first-progress budget per kind: ..._FIRST_PROGRESS_S__MODEL_CALL=600",
    )
    op_idle_s: dict[str, float] = Field(
        default_factory=dict,
        description="Idle budget (longest silence) per kind: ..._IDLE_S__MODEL_CALL=60",
    )
    op_max_duration_s: dict[str, float] = Field(
        default_factory=dict,
        description="Absolute duration budget per kind: LEASEHOLD_OP_MAX_DURATION_S__TOOL_CALL=300",
    )
    watchdog_free_renewals: int = Field(
        default=2, ge=0, description="Lease renewals the watchdog grants without looking"
    )
    watchdog_max_renewals: int = Field(
        default=10, ge=1, description="Renewals after which the watchdog intervenes, whatever else"
    )
    watchdog_suspicion_threshold: float = Field(
        default=3.0,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description="Suspicion (phi) of a silent operation at which the watchdog intervenes",
    )
    watchdog_evaluator: str | None = Field(
        default=None,
        description="Python callable 'module:function' the watchdog asks about silent operations",
    )
    watchdog_judge_url: str | None = Field(
        default=None,
        description="HTTP judge the watchdog POSTs evidence to (when no callable is set)",
    )
    watchdog_evaluator_timeout_s: float = Field(
        default=15.0,
        gt=0,
        le=HOUR_S,
        allow_inf_nan=False,
        description="Hard timeout of one evaluator call; a timeout means RENEW",
    )
    watchdog_max_step_extensions: int = Field(
        default=3, ge=0, description="Times a run's max_steps may be extended, at most"
    )
    step_extension_ratio: float = Field(
        default=0.5,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description="Each step extension adds this fraction of max_steps",
    )
    worker_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port where a worker serves Prometheus /metrics; 0: off",
    )
    worker_metrics_host: str = Field(
        default="127.0.0.1",
        description="Address a worker's metrics port listens on; beyond loopback it needs keys",
    )
    worker_metrics_max_connections: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="Connections a worker's metrics port serves at once; more get 503",
    )
    sse_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="Keep-alive comment period on idle event streams",
    )
    sse_send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="A follower that cannot take a message this long is dropped",
    )
    sse_retry_ms: int = Field(
        default=2000, ge=0, description="Reconnect delay hinted to SSE clients (retry: field)"
    )
    sse_queue_max: int = Field(
        default=10_000,
        ge=10,
        description="Events a follower may lag behind before it is dropped (it resumes by id)",
    )
    sse_write_buffer_max_bytes: int = Field(
        default=1_048_576,
        ge=65_536,
        le=64 * 1024 * 1024,
        description="Unsent bytes a follower written to directly may have queued before it is "
        "dropped (it resumes by id); at least the socket's 64 KiB high-water mark",
    )
    sse_block_ms: int = Field(
        default=5000, ge=10, description="How long one XREAD of an event feed blocks per call"
    )
    sse_max_followed_runs: int = Field(
        default=1000,
        ge=1,
        description="Distinct runs one API process follows at once (keys of its one blocking "
        "XREAD); a follower of one more gets 503",
    )
    sse_max_followers: int = Field(
        default=1000,
        ge=1,
        description="SSE responses (run events and /activity) one API process serves at once; "
        "past it 503 with Retry-After",
    )
    tree_stream_max_runs: int = Field(
        default=200,
        ge=1,
        le=10_000,
        description="Runs one GET /runs/{id}/events?include=children follows (the run and its "
        "descendants, first found first); past it a tree_truncated event and no more",
    )
    activity_max_queues: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Queues one GET /activity may follow; more named gets 400, and without "
        "queue= it follows the first this many",
    )
    activity_max_followed_queues: int = Field(
        default=1000,
        ge=1,
        description="Distinct queues one API process follows at once over /activity; a "
        "request for more gets 503",
    )
    redis_max_connections: int = Field(
        default=64,
        ge=1,
        description="Redis connections the API's request pool opens at most (per node in a "
        "cluster, where the floor is 512)",
    )
    redis_pool_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=POOL_WAIT_MAX_S,
        allow_inf_nan=False,
        description="Longest an API request waits for a free Redis connection; past it 503 "
        "with Retry-After",
    )
    redis_request_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=POOL_WAIT_MAX_S,
        allow_inf_nan=False,
        description="Longest an API request waits for Redis to answer one command; past it "
        "503 store-unavailable with Retry-After (a create answered so may have been written: "
        "retry it with the same Idempotency-Key)",
    )
    api_max_connections: int = Field(
        default=2000,
        ge=1,
        description="Open HTTP connections one API process accepts (uvicorn limit_concurrency); "
        "past it 503 with Retry-After",
    )
    api_keep_alive_s: float = Field(
        default=5.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="An idle keep-alive connection is closed after this long",
    )
    api_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="A request's line and headers must arrive within this long, or the "
        "connection is closed",
    )
    api_host: str = Field(default=DEFAULT_API_HOST, description="Address the API binds to")
    api_port: int = Field(
        default=DEFAULT_API_PORT, ge=0, le=65535, description="Port the API listens on"
    )
    api_keys: CommaList = Field(
        default_factory=list,
        description="Bearer keys the API accepts (comma-separated, several to rotate); when "
        "set, every route but /healthz needs `Authorization: Bearer <key>`",
    )
    trusted_hosts: CommaList = Field(
        default_factory=list,
        description="Host names the API answers to besides localhost, 127.0.0.1 and ::1 "
        "(comma-separated; `*.example.com` for subdomains, `*` for any); any other Host "
        "header gets 400, against DNS rebinding. Required when API_HOST is not loopback",
    )
    cors_origins: CommaList = Field(
        default_factory=list,
        description="Browser origins allowed by CORS (comma-separated, `*` for any); "
        "empty means CORS is off",
    )
    max_input_depth: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="Deepest nesting of arrays/objects a run's input or metadata may have "
        "(else 422)",
    )
    list_max_bytes: int = Field(
        default=4_194_304,
        ge=1024,
        le=268_435_456,
        description="Byte budget of one GET /runs page: it stops early (with next_cursor) "
        "once its items reach this size, so a list never costs more memory than this",
    )
    api_url: str | None = Field(
        default=None,
        description="Where the CLI reaches the API; unset means this host's API_HOST:API_PORT",
    )
    api_key: str | None = Field(default=None, description="Bearer key the CLI sends to the API")
    state_dir: Path = Field(
        default=Path(".leasehold"),
        description="Where `leasehold up` keeps the embedded Redis (AOF, log, redis.url with "
        "its password, redis.port)",
    )
    embedded_redis_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the embedded Redis; 0: the port STATE_DIR used last if free, "
        "else a free one",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level of every process"
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text for people, json for log pipelines: one object per line with "
        "run_id, owner_id and fence where they apply",
    )
    tracing: Literal["off", "otlp", "console"] = Field(
        default="off",
        description="OpenTelemetry traces (needs the [otel] extra): otlp exports over "
        "OTLP/HTTP to the endpoint of the standard OTEL_EXPORTER_OTLP_* variables, console "
        "prints spans to stderr; off imports nothing. OTEL_SDK_DISABLED=true also turns it off",
    )

    @field_validator(
        "queues", "handlers", "api_keys", "cors_origins", "trusted_hosts", mode="before"
    )
    @classmethod
    def _parse_comma_list(cls, value: object) -> object:
        return _split_commas(value)

    @field_validator("queues")
    @classmethod
    def _check_queue_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _QUEUE_NAME.fullmatch(name):
                raise ValueError(f"queue name {name!r} must match {QUEUE_NAME_PATTERN}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value:
            parse_redis_url(value)  # InvalidRedisUrl is a ValueError: one clear line, exit 2
        return value

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not _API_KEY.fullmatch(key):
                # the value is a secret: name the rule, never echo the key
                raise ValueError(f"every key must match {API_KEY_PATTERN}")
        return value

    @field_validator("worker_metrics_host")
    @classmethod
    def _check_worker_metrics_host(cls, value: str) -> str:
        if not _HOST.fullmatch(value):
            raise ValueError("must be an IP address or a host name")
        return value

    @model_validator(mode="after")
    def _check_worker_metrics_exposure(self) -> Settings:
        # an open metrics port beyond loopback tells anyone the queues, handlers and load
        if (
            self.worker_metrics_port
            and not self.api_keys
            and not is_loopback(self.worker_metrics_host)
        ):
            raise ValueError(
                f"{ENV_PREFIX}WORKER_METRICS_HOST={self.worker_metrics_host} serves metrics "
                f"beyond loopback: set {ENV_PREFIX}API_KEYS so scrapes need a bearer key"
            )
        return self

    @model_validator(mode="after")
    def _check_lease_timing(self) -> Settings:
        if (
            self.lease_safety_margin_s is not None
            and self.lease_safety_margin_s >= self.lease_ttl_s
        ):
            raise ValueError(
                f"{ENV_PREFIX}LEASE_SAFETY_MARGIN_S must be shorter than {ENV_PREFIX}LEASE_TTL_S"
            )
        return self

    @property
    def renew_interval_s(self) -> float:
        """Heartbeat period: a third of the TTL, so two renewals may fail before expiry."""
        return self.lease_ttl_s / 3

    @property
    def effective_reconcile_interval_s(self) -> float:
        """How often each reconciler scans; defaults to TTL/3 like the heartbeat."""
        return self.reconcile_interval_s or self.lease_ttl_s / 3

    @property
    def effective_safety_margin_s(self) -> float:
        """Slack subtracted from the jeopardy deadline to absorb clock-rate drift and latency."""
        if self.lease_safety_margin_s is not None:
            return self.lease_safety_margin_s
        return self.lease_ttl_s / 6

    @property
    def lease_ttl_ms(self) -> int:
        """The TTL in the unit the Lua scripts use."""
        return max(1, round(self.lease_ttl_s * 1000))

    @property
    def replica_ack_timeout_ms(self) -> int:
        """The WAIT timeout in the unit Redis takes."""
        return max(1, round(self.replica_ack_timeout_s * 1000))

    @property
    def retention_ms(self) -> dict[str, int]:
        """How long a finished run is kept, per terminal status, in the unit Lua uses."""
        seconds = {
            "succeeded": self.retention_succeeded_s,
            "failed": self.retention_failed_s,
            "cancelled": self.retention_cancelled_s,
            "orphaned": self.retention_orphaned_s,
            "expired": self.retention_expired_s,
        }
        return {status: max(1, round(value * 1000)) for status, value in seconds.items()}

    @property
    def queued_ttl_ms(self) -> int:
        """The queued time-to-live in the unit Lua uses."""
        return max(1, round(self.queued_ttl_s * 1000))

    @property
    def demo_enabled(self) -> bool:
        """The demo is on: LEASEHOLD_HANDLERS names app.demo (or one of its modules)."""
        return any(
            module == DEMO_HANDLERS or module.startswith(f"{DEMO_HANDLERS}.")
            for module in self.handlers
        )

    @property
    def embedded_redis_url_file(self) -> Path:
        """Where `leasehold up` writes the URL of the Redis it started, for other commands."""
        return self.state_dir / "redis.url"

    @property
    def client_api_url(self) -> str:
        """Where the CLI reaches the API: LEASEHOLD_API_URL, else this host's API."""
        return client_api_url(self.api_url, self.api_host, self.api_port)

    def resolved_redis_url(self) -> str:
        """The Redis URL to connect to: configured, else the embedded one, else localhost.

        Other terminals' ``leasehold worker`` find the Redis started by ``leasehold up``
        through the URL file it writes under ``state_dir``.
        """
        if self.redis_url:
            return self.redis_url
        url_file = self.embedded_redis_url_file
        if url_file.is_file():
            return url_file.read_text().strip()
        return "redis://127.0.0.1:6379/0"


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, with CLI flags as overrides.

    Raises :class:`ConfigurationError` with one readable line per invalid value.
    """
    clean = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach a listener on ``host``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _describe(exc: ValidationError) -> str:
    """One line; each problem names its variable and, unless it may be a secret, the value."""
    problems = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if error["loc"]:
            field = "_".join(str(part) for part in error["loc"])
            shown = "" if _SECRET_FIELD.search(field) else f" (got {error['input']!r})"
            message = f"{ENV_PREFIX}{field.upper()}: {message}{shown}"
        problems.append(message)
    return "invalid setting " + "; ".join(problems)


def _from_environment(fields: dict[str, FieldInfo]) -> dict[str, Any]:
    """Each field's value from its ``LEASEHOLD_<NAME>`` variable (any case), if set.

    A container setting is JSON unless marked :class:`NoDecode`; a ``dict`` one also takes
    ``LEASEHOLD_<NAME>__<KEY>`` variables, merged over its JSON. Raises
    :class:`SettingsError` for a container whose JSON does not parse.
    """
    environ = variables()
    values: dict[str, Any] = {}
    for name, field in fields.items():
        env_name = f"{ENV_PREFIX.lower()}{name}"
        value: Any = environ.get(env_name)
        if _is_container(field):
            try:
                value = _container_value(env_name, field, value, environ)
            except ValueError as exc:
                message = f'error parsing value for field "{name}" from source "EnvSettingsSource"'
                raise SettingsError(message) from exc
        if value is not None:
            values[name] = value
    return values


def _is_container(field: FieldInfo) -> bool:
    origin = get_origin(field.annotation) or field.annotation
    return isinstance(origin, type) and issubclass(origin, _CONTAINERS)


def _container_value(
    env_name: str, field: FieldInfo, value: str | None, environ: dict[str, str]
) -> Any:
    """The JSON of ``value`` (as written for NoDecode), with the ``__KEY`` variables."""
    nested = _nested(env_name, environ)
    if value is None:
        return nested or None
    decoded: Any = value if NoDecode in field.metadata else json.loads(value)
    return _merged(decoded, nested) if isinstance(decoded, dict) else decoded


def _nested(env_name: str, environ: dict[str, str]) -> dict[str, Any]:
    """``{key: value}`` of each ``<env_name>__key[__sub...]`` variable.

    A value is as written, except under two keys or more, where (as pydantic-settings
    did for a ``dict[str, float]``) it is JSON when it parses; either is then validated.
    """
    prefix = f"{env_name}{NESTED_DELIMITER}"
    result: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(prefix):
            continue
        *keys, last = name[len(prefix) :].split(NESTED_DELIMITER)
        target = result
        for key in keys:
            target = target.setdefault(key, {})
        target[last] = _json_or_text(value) if keys and value else value
    return result


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` over it; two dicts under one key are merged the same way."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
