"""Pydantic models shared by the API, the store and the client.

Times are timezone-aware UTC datetimes here (ISO-8601 in JSON) and epoch
milliseconds in Redis; the store converts at the boundary.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator
from pydantic import BaseModel as PydanticModel

# the statuses live without pydantic (app.statuses: `leasehold --help` lists them); named here too
from app.statuses import PARKED_STATUSES as PARKED_STATUSES
from app.statuses import TERMINAL_EVENT_TYPES as TERMINAL_EVENT_TYPES
from app.statuses import TERMINAL_STATUSES as TERMINAL_STATUSES
from app.statuses import RunStatus as RunStatus


class BaseModel(PydanticModel):
    """Every model here: its validator and serializer are built on first use, not at import.

    Building them is most of what importing this module costs (~20 ms for ~30 models),
    and a worker uses two or three of these models while every process imports them
    all: ``leasehold worker`` and ``runs get`` pay for start-up each time (issue 19).
    Subclasses keep their own ``model_config``; pydantic merges it with this one.
    """

    model_config = ConfigDict(defer_build=True)


QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
HANDLER_NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}\.[0-9A-HJKMNP-TV-Z]{26}$"
WORKER_ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
# a durable wait's or signal's name (ctx.sleep(name=), wait_for_signal, /signals/{name})
WAIT_NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
WAIT_NAME = re.compile(WAIT_NAME_PATTERN)
# a concurrency or singleton key (a tenant, a thread): no '|' or newline (lane names
# and held lists in lib.lua are built with them)
FLOW_KEY_PATTERN = r"^[A-Za-z0-9_.:@/\-]{1,128}$"
PRIORITY_MIN = -100
PRIORITY_MAX = 100
# the largest concurrency limit PUT /queues/{name}/limits takes
LIMIT_MAX = 1_000_000
OnConflict = Literal["reject", "enqueue", "cancel_active", "replace_queued"]
RUN_ID = re.compile(RUN_ID_PATTERN)
HANDLER_NAME = re.compile(HANDLER_NAME_PATTERN)
FLOW_KEY = re.compile(FLOW_KEY_PATTERN)
# A rate-limit key: segments of letters, digits, `_`, `.`, `-`, joined by `:`
# (`openai`, `crm:acme`). A template names a segment `{name}` to stand for any one
# segment (`crm:{tenant}` covers `crm:acme`, not `crm:acme:eu`). No `{`/`}` in a key
# itself: a handler bucket's Redis key puts it inside a hash tag.
RATE_LIMIT_KEY_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}(:[A-Za-z0-9_.\-]{1,64}){0,3}$"
RATE_LIMIT_TEMPLATE_PATTERN = (
    r"^([A-Za-z0-9_.\-]{1,64}|\{[a-z_]{1,32}\})(:([A-Za-z0-9_.\-]{1,64}|\{[a-z_]{1,32}\})){0,3}$"
)
RATE_LIMIT_KEY = re.compile(RATE_LIMIT_KEY_PATTERN)
RATE_LIMIT_TEMPLATE = re.compile(RATE_LIMIT_TEMPLATE_PATTERN)
MAX_RUN_RATE_LIMITS = 8  # rate-limit keys one run may name for its start
EVENT_ID_PATTERN = r"^\d{1,20}-\d{1,20}$"
EVENT_ID = re.compile(EVENT_ID_PATTERN)
MAX_STREAM_ID_PART = 2**64 - 1
LAST_STREAM_ID = (MAX_STREAM_ID_PART, MAX_STREAM_ID_PART)  # as event_id_order gives it


def is_stream_id(value: str) -> bool:
    """Whether Redis accepts ``value`` as a stream id: ``<ms>-<seq>``, ASCII digits, 64-bit each.

    Checked in full (Python's ``$`` allows a trailing newline, ``\\d`` any Unicode
    digit): an id Redis rejects would fail the stream after its 200 was sent.
    """
    return (
        value.isascii()
        and EVENT_ID.fullmatch(value) is not None
        and all(int(part) <= MAX_STREAM_ID_PART for part in value.split("-"))
    )


def is_resume_point(value: str) -> bool:
    """Whether a stream can be read *after* ``value``: a stream id, but not the very last one.

    Redis has no id after ``2^64-1-2^64-1`` (an exclusive range from it is an
    error), so that one, valid as an id, would fail the stream after its 200.
    """
    return is_stream_id(value) and event_id_order(value) != LAST_STREAM_ID


def event_id_order(event_id: str) -> tuple[int, int]:
    """Sort key of a Redis stream id (``<ms>-<seq>``); ids compare as pairs, not text."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


OnLeaseExpired = Literal["orphan", "retry"]


class RunError(BaseModel):
    """Why a run failed or was orphaned: a stable code, a message, and evidence."""

    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class Run(BaseModel):
    """A run as clients see it."""

    id: str
    queue: str
    handler: str
    status: RunStatus
    input: Any = None
    output: Any = None
    error: RunError | None = None
    attempt: int = 1
    max_attempts: int = 1
    on_lease_expired: OnLeaseExpired = "orphan"
    owner_id: str | None = None
    fence: int = 0
    lease_expires_at: datetime | None = None
    lease_ttl_ms: int | None = None
    created_at: datetime
    started_at: datetime | None = Field(
        default=None, description="When the current (or last) attempt was claimed"
    )
    first_started_at: datetime | None = Field(
        default=None,
        description="When the first attempt was claimed: the run's duration is "
        "first_started_at → finished_at, across attempts and parks",
    )
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    idempotency_key: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    last_event_id: str | None = None
    retention_s: float | None = Field(
        default=None, description="This run's own retention, when its request set one"
    )
    escalation: dict[str, Any] | None = Field(
        default=None,
        description="While waiting_human: why it waits for a person (reason, evidence; "
        "reason ask_human: the handler's question)",
    )
    waiting_for: dict[str, Any] | None = Field(
        default=None,
        description="While waiting: what the parked run waits for (kind sleep or signal, "
        "subject: the sleep's or signal's name, step, until_ms: when it wakes anyway)",
    )
    schedule_id: str | None = Field(
        default=None, description="The schedule that made this run, if one did"
    )
    fire_at: datetime | None = Field(
        default=None, description="The schedule's fire time this run is (one run per fire time)"
    )
    run_at: datetime | None = Field(
        default=None,
        description="A delayed start (run_at / delay_s): no worker starts it before this time. "
        "While it waits the run is `queued` and its stream's `wait` event says until when",
    )
    retry_of: str | None = Field(
        default=None,
        description="The ended run this one re-runs (POST /runs/{id}/retry); it may be gone "
        "after its retention",
    )
    retried_by: str | None = Field(
        default=None, description="The run that re-runs this one, once it was retried"
    )
    concurrency_key: str | None = Field(
        default=None, description="The key whose concurrency limit the run counts against"
    )
    singleton_key: str | None = Field(
        default=None, description="At most one run of this key runs at a time"
    )
    priority: int = Field(default=0, description="Higher starts first within its lane")
    blocked_on: str | None = Field(
        default=None,
        description="While queued: the limit its lane waits on (h:<handler>, "
        "k:<concurrency key>, s:<singleton key>), as the last `wait` event says",
    )
    parent_id: str | None = Field(
        default=None,
        description="The run that spawned this one (ctx.spawn); absent on a top-level run",
    )
    root_id: str | None = Field(
        default=None,
        description="The top-level run of this run's tree (its own id when it has no parent); "
        "None only for runs created before runs could spawn runs",
    )
    depth: int = Field(default=0, description="How many parents above it: 0 for a top-level run")


class RunEvent(BaseModel):
    """One entry of a run's event stream; ``id`` is the Redis stream id (and the SSE id).

    The synthetic ``replay_unavailable`` event (sent when history a client asked for
    was trimmed) is not stored and has an empty ``id``.
    """

    id: str
    run_id: str
    type: str
    ts: datetime
    fence: int
    data: dict[str, Any] = Field(default_factory=dict)


class ActivityEntry(BaseModel):
    """One lifecycle event of a run, as its queue's activity stream recorded it.

    ``id`` is the entry's id in the activity stream (what a follower resumes from);
    ``event_id`` is the same event's id in the run's own stream, comparable with
    ``Run.last_event_id``, so a client can tell whether a run it read is newer.
    """

    id: str
    queue: str
    run_id: str
    event_id: str
    type: str
    status: RunStatus | None = None
    fence: int
    ts: datetime


class RunBudget(BaseModel):
    """Run-level budgets, each failing with its own typed, non-retryable error."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(default=None, ge=1, description="ctx.step() calls allowed")
    max_duration_s: float | None = Field(
        default=None, gt=0, description="Wall time one attempt may take, progress or not"
    )


ResolveAction = Literal["retry", "fail", "succeed"]
EffectOutcomeDecision = Literal["applied", "not_applied"]


class ResolveRequest(BaseModel):
    """Body of POST /runs/{id}/resolve: a person's decision on a reconciliation_required run.

    ``effect_outcome`` says what the person found out about the effects whose
    outcome was unknown: ``applied`` records them as done (with ``effect_result``,
    else null), so a retried run does not repeat them; ``not_applied`` drops their
    records, so a retried run performs them again. A retry needs it: without it the
    run would stop at the same effect again.
    """

    model_config = ConfigDict(extra="forbid")

    action: ResolveAction = Field(
        description="retry: queue the run again (fence+1); fail / succeed: end it so"
    )
    output: Any = Field(default=None, description="The run's output, for succeed")
    effect_outcome: EffectOutcomeDecision | None = Field(
        default=None, description="Whether the unknown effects happened; required for retry"
    )
    effect_result: Any = Field(
        default=None, description="Result to record for the effects, with effect_outcome=applied"
    )
    note: str | None = Field(
        default=None, max_length=2000, description="Why, for the run's event history"
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> ResolveRequest:
        if self.action == "retry" and self.effect_outcome is None:
            raise ValueError(
                "retry needs effect_outcome (applied or not_applied): without it the run "
                "would stop at the same effect again"
            )
        if self.output is not None and self.action != "succeed":
            raise ValueError("output is only accepted with action succeed")
        if self.effect_result is not None and self.effect_outcome != "applied":
            raise ValueError("effect_result is only accepted with effect_outcome applied")
        return self


RETRYABLE_STATUSES = frozenset(
    {RunStatus.FAILED, RunStatus.ORPHANED, RunStatus.CANCELLED, RunStatus.EXPIRED}
)
CheckpointChoice = Literal["keep", "drop"]


RetryableStatus = Literal["failed", "orphaned", "cancelled", "expired"]
ERROR_CODE_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
OPERATION_ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
DEFAULT_RETRY_STATUSES: tuple[RetryableStatus, ...] = ("failed", "orphaned")


class RetryFilter(BaseModel):
    """Body of POST /runs/retry: which ended runs a bulk retry re-runs, and how.

    Every filter given must hold: ``queue``, ``handler``, ``status`` (default failed
    and orphaned), ``error_code`` (the run's ``error.code``), and a finish-time range
    ``[finished_after, finished_before)`` (RFC 3339 with a zone). ``limit`` caps the
    runs re-run (default and most: ``LEASEHOLD_RETRY_OPERATION_MAX_RUNS``). Runs created
    after the operation started are never looked at, its own re-runs included.
    """

    model_config = ConfigDict(extra="forbid")

    queue: str | None = Field(default=None, pattern=QUEUE_NAME_PATTERN)
    handler: str | None = Field(default=None, pattern=HANDLER_NAME_PATTERN)
    status: list[RetryableStatus] = Field(
        default_factory=lambda: list(DEFAULT_RETRY_STATUSES), min_length=1, max_length=4
    )
    error_code: str | None = Field(default=None, pattern=ERROR_CODE_PATTERN)
    finished_after: AwareDatetime | None = None
    finished_before: AwareDatetime | None = None
    limit: int | None = Field(default=None, ge=1, strict=True)
    checkpoint: CheckpointChoice = "keep"

    @model_validator(mode="after")
    def _range_in_order(self) -> RetryFilter:
        after, before = self.finished_after, self.finished_before
        if after is not None and before is not None and after >= before:
            raise ValueError("finished_after must be before finished_before")
        if len(set(self.status)) != len(self.status):
            raise ValueError("status names a status more than once")
        return self

    def matches(self, run: Run) -> bool:
        """Whether an ended run is one this filter re-runs (not yet re-run, in range)."""
        finished = run.finished_at
        return (
            run.status.value in self.status
            and (self.queue is None or run.queue == self.queue)
            and (self.handler is None or run.handler == self.handler)
            and (
                self.error_code is None
                or (run.error is not None and run.error.code == self.error_code)
            )
            and (
                self.finished_after is None
                or (finished is not None and finished >= self.finished_after)
            )
            and (
                self.finished_before is None
                or (finished is not None and finished < self.finished_before)
            )
        )


OperationStatus = Literal["running", "stalled", "done", "cancelled"]


class RetriedPair(BaseModel):
    """One run a bulk retry re-ran, and its new run."""

    run_id: str
    retried_as: str


class RetryOperation(BaseModel):
    """A bulk retry (POST /runs/retry) and its progress: GET /operations/{id}.

    ``running`` while an API process drives it step by step; ``stalled`` when the
    process driving it stopped (its lease ran out): ``POST /operations/{id}/resume``
    continues it from its last saved step; ``done`` once nothing older is left or
    ``limit`` runs were re-run; ``cancelled`` by ``POST /operations/{id}/cancel``.
    """

    id: str
    kind: Literal["retry"] = "retry"
    status: OperationStatus
    filter: RetryFilter
    limit: int = Field(description="Most runs it re-runs")
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    steps: int = Field(0, description="Steps done (each saved its progress)")
    looked_at: int = Field(0, description="Runs looked at")
    matched: int = Field(0, description="Runs the filter matched")
    retried: int = Field(0, description="Runs re-run (a new linked run each)")
    skipped: int = Field(0, description="Matched but re-run already, or no longer ended")
    errors: int = Field(0, description="Re-runs Redis refused (see last_error)")
    last_error: str | None = None
    recent: list[RetriedPair] = Field(
        default_factory=list, description="The last few runs re-run, newest last"
    )


class QueueLimits(BaseModel):
    """A queue's concurrency limits across all workers (PUT /queues/{name}/limits).

    ``queue`` caps the queue's running runs; ``handlers`` caps runs of one handler;
    ``keys`` caps runs of one ``concurrency_key`` and ``default_key`` every other key.
    Unnamed means unlimited. The limits are replaced whole.
    """

    model_config = ConfigDict(extra="forbid")

    queue: int | None = Field(default=None, ge=1, le=LIMIT_MAX, strict=True)
    handlers: dict[str, int] = Field(default_factory=dict)
    default_key: int | None = Field(default=None, ge=1, le=LIMIT_MAX, strict=True)
    keys: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self) -> QueueLimits:
        for names, pattern in ((self.handlers, HANDLER_NAME), (self.keys, FLOW_KEY)):
            for name, limit in names.items():
                if not pattern.fullmatch(name):
                    raise ValueError(f"{name[:80]!r} is not a valid handler or key name")
                if type(limit) is not int or not 1 <= limit <= LIMIT_MAX:
                    raise ValueError(f"limit of {name[:80]!r} must be an integer 1..{LIMIT_MAX}")
        return self


class KeyUsage(BaseModel):
    """One concurrency key of a queue: its runs running and queued, and its limit."""

    key: str
    running: int
    queued: int
    limit: int | None = None


class HandlerUsage(BaseModel):
    """One handler of a queue: its runs running and its limit."""

    handler: str
    running: int
    limit: int | None = None


class QueueFlow(BaseModel):
    """A queue's flow control at one moment: limits, slots used, the busiest keys."""

    limits: QueueLimits
    handlers: list[HandlerUsage] = Field(
        description="handlers with a limit, or with runs holding a slot of one (a handler "
        "without a limit takes no slot, so its running runs are not counted here)"
    )
    keys: list[KeyUsage] = Field(
        description="the busiest concurrency keys (most running, then most queued), at "
        "most LEASEHOLD_QUEUE_TOP_KEYS"
    )
    limited_keys: list[KeyUsage] = Field(
        description="the keys with a limit of their own (at most LEASEHOLD_MAX_LIMITS)"
    )
    key_slots: int = Field(description="runs running with a concurrency key, every key")
    blocked: int = Field(description="resources (handler, key, singleton) lanes wait on")


class RunPage(BaseModel):
    """One page of GET /runs; pass ``next_cursor`` back to get the next page."""

    items: list[Run]
    next_cursor: str | None = None


class QueueInfo(BaseModel):
    """One declared queue as GET /queues reports it, read from Redis at one moment."""

    name: str
    configured: bool = Field(
        description="named in this API's LEASEHOLD_QUEUES (else declared by a worker's "
        "configuration or by PUT /queues/{name})"
    )
    ready: int = Field(description="runs waiting to be claimed")
    running: int = Field(description="runs whose lease is held (running or cancelling)")
    delayed: int = Field(description="runs waiting for their retry time")
    parked: int = Field(description="waiting_human and reconciliation_required runs")
    oldest_queued_age_s: float = Field(description="age of the run at the head of the line")
    flow: QueueFlow | None = Field(
        default=None, description="limits, slots and the busiest keys (GET /queues/{name})"
    )
    memory_bytes: int = Field(
        description="estimate: the queue's index keys plus a sample of its newest runs "
        "(record and events) scaled to the number of runs it lists"
    )


class SeriesBucket(BaseModel):
    """One minute of a queue's outcomes: runs that came to each end in that minute."""

    start: datetime = Field(description="The minute's start (Redis clock)")
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    orphaned: int = 0
    expired: int = 0
    lease_expired: int = Field(
        default=0,
        description="Expired leases the reconciler acted on (orphaned, requeued, parked)",
    )


class QueueSeries(BaseModel):
    """Answer of GET /queues/{name}/series: per-minute outcomes, oldest minute first."""

    queue: str
    bucket_s: int = Field(description="Width of one bucket: 60 s")
    buckets: list[SeriesBucket] = Field(
        description="The last `minutes` minutes, the current (partial) one last"
    )


class PurgeRequest(BaseModel):
    """Body of POST /runs/purge: which finished runs to delete, one bounded batch per call.

    Only terminal runs are ever deleted; the filters narrow that further. ``limit``
    bounds the runs one call looks at (at most ``LEASEHOLD_PURGE_BATCH_MAX``); pass
    ``next_cursor`` back as ``cursor`` until ``done``.
    """

    model_config = ConfigDict(extra="forbid")

    queue: str | None = Field(default=None, pattern=QUEUE_NAME_PATTERN)
    status: RunStatus | None = Field(default=None, description="A terminal status")
    handler: str | None = Field(default=None, pattern=HANDLER_NAME_PATTERN)
    finished_before: AwareDatetime | None = Field(
        default=None, description="Only runs that finished before this time (RFC 3339, with zone)"
    )
    limit: int = Field(
        default=100, ge=1, le=10_000, strict=True, description="Runs looked at in this call"
    )
    cursor: str | None = Field(default=None, max_length=256)

    @field_validator("status")
    @classmethod
    def _terminal_only(cls, status: RunStatus | None) -> RunStatus | None:
        if status is not None and not status.is_terminal:
            terminal = ", ".join(sorted(s.value for s in TERMINAL_STATUSES))
            raise ValueError(f"only finished runs can be purged: status must be one of {terminal}")
        return status


class PurgeResult(BaseModel):
    """Answer of POST /runs/purge: what this call deleted, and where to go on."""

    deleted: int = Field(description="Runs deleted by this call")
    ids: list[str] = Field(description="Their ids")
    next_cursor: str | None = Field(description="Pass back as `cursor` to go on; null when done")
    done: bool = Field(description="Nothing older is left to look at")


class WorkerInfo(BaseModel):
    """A live executor as advertised in the worker registry."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    running: int
    loop_lag_ms: float
    started_at: datetime
    last_heartbeat_at: datetime
    draining: bool = Field(
        default=False, description="Stopped claiming (SIGTERM or POST /workers/{id}/drain)"
    )
    lease_ttl_ms: int | None = Field(
        default=None, description="The worker's own lease TTL, which `alive` is judged by"
    )
    alive: bool = Field(
        default=True,
        description="Heartbeat seen within one (its own) lease TTL; a dead worker's runs are being "
        "reconciled, and it leaves the list when its advertisement expires",
    )


class RedisNode(BaseModel):
    """One Redis data node as readiness found it."""

    address: str = Field(description="host:port")
    role: Literal["primary", "replica"]
    slots: list[str] = Field(
        default_factory=list, description="Hash slot ranges it serves, e.g. 0-5460 (cluster)"
    )
    replicas: int | None = Field(
        default=None, description="Replicas connected to it (primaries), from INFO replication"
    )


class RedisTopology(BaseModel):
    """Which Redis deployment the process talks to, and its shape right now."""

    mode: Literal["single", "cluster", "sentinel"]
    primary: str | None = Field(
        default=None, description="The primary's address (single and sentinel modes)"
    )
    service_name: str | None = Field(default=None, description="The sentinel service name")
    sentinels: list[str] = Field(default_factory=list, description="Sentinel addresses")
    nodes: list[RedisNode] = Field(default_factory=list)


class RateLimitSpec(BaseModel):
    """How fast one rate-limit key (or every key of a template) lets tokens pass.

    GCRA: after an idle spell ``burst`` tokens pass at once, then one every
    ``period_s / limit``; over any window of one period at most ``limit + burst`` pass.
    """

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(ge=1, le=1_000_000_000, strict=True, description="tokens per period")
    period_s: float = Field(
        default=1.0,
        ge=0.001,
        le=86_400 * 366,
        strict=True,
        allow_inf_nan=False,
        description="seconds",
    )
    burst: int = Field(
        default=1,
        ge=1,
        strict=True,
        le=1_000_000_000,
        description="tokens an idle bucket lets pass at once (the most one take may cost)",
    )

    @property
    def period_ms(self) -> int:
        """The period in whole ms (at least 1), as the scripts take it."""
        return max(1, round(self.period_s * 1000))


class BucketState(BaseModel):
    """One bucket read at one moment, by the Redis clock."""

    bucket: str = Field(description="the concrete key (a template's instance, e.g. crm:acme)")
    available: int = Field(description="tokens an immediate take would find")
    next_token_at: datetime = Field(description="when one token passes (now, if available)")


class RateLimitInfo(BaseModel):
    """A declared rate-limit key or template, as GET /rate-limits reports it."""

    key: str
    template: bool = Field(description="a template (`crm:{tenant}`): its buckets are per instance")
    spec: RateLimitSpec
    state: BucketState | None = Field(
        default=None,
        description="its handler bucket now (None for a template: GET /rate-limits/{instance})",
    )
    start_state: BucketState | None = Field(
        default=None,
        description="with ?queue=: that queue's start bucket now (tokens free for starts; "
        "runs already waiting in line for a slot are not subtracted)",
    )


SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
Overlap = Literal["skip", "allow", "cancel_previous", "buffer_one"]
MissedFires = Literal["skip", "latest", "all"]


class Schedule(BaseModel):
    """A schedule as clients see it, with its next fire times."""

    id: str
    queue: str
    cron: str | None = None
    timezone: str = "UTC"
    interval_s: float | None = None
    overlap: Overlap
    missed: MissedFires
    catchup_window_s: float
    paused: bool
    version: int
    run: dict[str, Any] = Field(description="The run template each fire creates")
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None = Field(
        default=None, description="When it fires next (none while paused)"
    )
    next_fires: list[datetime] = Field(
        default_factory=list, description="The next few fire times, from now"
    )
    last_fire_at: datetime | None = None
    last_run_id: str | None = None
    buffered_fire_at: datetime | None = Field(
        default=None, description="buffer_one: a fire waiting for the previous run to end"
    )
    fired_count: int = 0
    skipped_count: int = Field(default=0, description="Fires the overlap policy dropped")
    missed_count: int = Field(default=0, description="Fires the missed-fire policy dropped")


# the API-only models (app.api_models), imported on first use: see that module's docstring
_API_MODELS = frozenset(
    {
        "ConsoleConfig",
        "CreateRunRequest",
        "ResumeRequest",
        "SignalRequest",
        "SignalResult",
        "RetryRequest",
        "PriorityChange",
        "QueuePage",
        "StatusChange",
        "HandlerInfo",
        "WorkerDrain",
        "Problem",
        "CreateRunsRequest",
        "CreateRunsItem",
        "CreateRunsResult",
        "RedisMemory",
        "ReadinessReport",
        "RateLimitPage",
        "ScheduleSpecFields",
        "CreateScheduleRequest",
        "UpdateScheduleRequest",
        "SchedulePage",
        "TriggerRequest",
        "BackfillRequest",
        "FireResult",
    }
)

if TYPE_CHECKING:
    from app.api_models import (
        BackfillRequest as BackfillRequest,
    )
    from app.api_models import (
        ConsoleConfig as ConsoleConfig,
    )
    from app.api_models import (
        CreateRunRequest as CreateRunRequest,
    )
    from app.api_models import (
        CreateRunsItem as CreateRunsItem,
    )
    from app.api_models import (
        CreateRunsRequest as CreateRunsRequest,
    )
    from app.api_models import (
        CreateRunsResult as CreateRunsResult,
    )
    from app.api_models import (
        CreateScheduleRequest as CreateScheduleRequest,
    )
    from app.api_models import (
        FireResult as FireResult,
    )
    from app.api_models import (
        HandlerInfo as HandlerInfo,
    )
    from app.api_models import (
        PriorityChange as PriorityChange,
    )
    from app.api_models import (
        Problem as Problem,
    )
    from app.api_models import (
        QueuePage as QueuePage,
    )
    from app.api_models import (
        RateLimitPage as RateLimitPage,
    )
    from app.api_models import (
        ReadinessReport as ReadinessReport,
    )
    from app.api_models import (
        RedisMemory as RedisMemory,
    )
    from app.api_models import (
        ResumeRequest as ResumeRequest,
    )
    from app.api_models import (
        RetryRequest as RetryRequest,
    )
    from app.api_models import (
        SchedulePage as SchedulePage,
    )
    from app.api_models import (
        ScheduleSpecFields as ScheduleSpecFields,
    )
    from app.api_models import (
        SignalRequest as SignalRequest,
    )
    from app.api_models import (
        SignalResult as SignalResult,
    )
    from app.api_models import (
        StatusChange as StatusChange,
    )
    from app.api_models import (
        TriggerRequest as TriggerRequest,
    )
    from app.api_models import (
        UpdateScheduleRequest as UpdateScheduleRequest,
    )
    from app.api_models import (
        WorkerDrain as WorkerDrain,
    )


def __getattr__(name: str) -> Any:
    """An API-only model, imported from :mod:`app.api_models` the first time it is asked for.

    Keeps ``from app.models import CreateRunRequest`` working for the API, the client
    and users' code, while a worker, which asks for none of them, never creates them.
    """
    if name in _API_MODELS:
        from app import api_models

        return getattr(api_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
