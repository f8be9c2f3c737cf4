"""The API's request and response models that no worker, store or reconciler uses.

They were in :mod:`app.models`, which every process imports; creating a pydantic class
costs even with its validator deferred, and a worker's start-up is time before its
first claim (issue 19), so the models only the API, the CLI and the client use live
here: import them from :mod:`app.models.api` (``from app.models.api import
CreateRunRequest``); :mod:`app.models` does not import this module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator

from app.models import (
    FLOW_KEY_PATTERN,
    HANDLER_NAME_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    MAX_RUN_RATE_LIMITS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_NAME_PATTERN,
    RATE_LIMIT_KEY_PATTERN,
    SCHEDULE_ID_PATTERN,
    SCRIPT_INT_MAX,
    BaseModel,
    CheckpointChoice,
    MissedFires,
    OnConflict,
    OnLeaseExpired,
    Overlap,
    Run,
    RunBudget,
    RunStatus,
    Versioning,
)
from app.models.read import QueueInfo, RateLimitInfo, RedisTopology, Schedule


class ConsoleConfig(BaseModel):
    """Body of GET /config: what the console needs to judge liveness on its own."""

    version: str
    now: datetime = Field(description="The API's clock, to compare heartbeats with")
    lease_ttl_ms: int = Field(description="Run lease TTL the deployment is configured with")
    heartbeat_interval_ms: int = Field(description="How often workers renew and advertise")
    auth_required: bool


class CreateRunRequest(BaseModel):
    """Body of POST /runs."""

    model_config = ConfigDict(extra="forbid")

    handler: str = Field(pattern=HANDLER_NAME_PATTERN)
    input: Any = Field(default_factory=dict)
    queue: str = Field(default="default", pattern=QUEUE_NAME_PATTERN)
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    on_lease_expired: OnLeaseExpired | None = None
    idempotency_key: str | None = Field(default=None, pattern=IDEMPOTENCY_KEY_PATTERN)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Tags of the caller's own, to find the run by (GET /runs?metadata.<key>=); "
        "at most LEASEHOLD_MAX_METADATA_BYTES (16 KiB) of compact JSON, else 422",
    )
    budget: RunBudget | None = None
    cancel_on_disconnect: bool = False
    retention_s: float | None = Field(
        default=None,
        gt=0,
        strict=True,  # a number, not "3600" or true
        allow_inf_nan=False,
        description="How long to keep the run once it ends, whatever its status "
        "(default: the per-status LEASEHOLD_RETENTION_*_S); at most LEASEHOLD_RETENTION_MAX_S",
    )
    queued_ttl_s: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="How long the run may wait unclaimed before it ends `expired` "
        "(default LEASEHOLD_QUEUED_TTL_S); at most LEASEHOLD_QUEUED_TTL_MAX_S",
    )
    run_at: AwareDatetime | None = Field(
        default=None,
        description="Start no earlier than this time (RFC 3339 with an offset); a past time "
        "starts at once. At most LEASEHOLD_START_MAX_AHEAD_S ahead. Not with delay_s",
    )
    delay_s: float | None = Field(
        default=None,
        ge=0,
        strict=True,
        allow_inf_nan=False,
        description="Start no earlier than this many seconds after the create (Redis clock); "
        "at most LEASEHOLD_START_MAX_AHEAD_S. Not with run_at",
    )

    @field_validator("run_at", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        # pydantic would read a bare number as epoch seconds (or ms): only a string is clear
        if value is not None and not isinstance(value, str | datetime):
            raise ValueError("run_at must be an RFC 3339 string with an offset")
        return value

    @model_validator(mode="after")
    def _one_start_time(self) -> CreateRunRequest:
        if self.run_at is not None and self.delay_s is not None:
            raise ValueError("give run_at or delay_s, not both")
        return self

    rate_limits: list[Annotated[str, Field(pattern=RATE_LIMIT_KEY_PATTERN)]] = Field(
        default_factory=list,
        max_length=MAX_RUN_RATE_LIMITS,
        description="Declared rate-limit keys (PUT /rate-limits/{key}; a template's instance "
        "such as crm:acme) whose start buckets gate this run's start, one token each: a run "
        "not yet eligible waits in the queue's delayed set until its exact start time, with "
        "a `wait` event (kind rate_limited). At most 8",
    )
    concurrency_key: str | None = Field(
        default=None,
        pattern=FLOW_KEY_PATTERN,
        description="A key (tenant, thread) whose limit the run counts against: "
        "PUT /queues/{queue}/limits sets it (`keys`, else `default_key`); keys take "
        "turns, round-robin",
    )
    singleton_key: str | None = Field(
        default=None,
        pattern=FLOW_KEY_PATTERN,
        description="At most one run of this key runs at a time; `on_conflict` says "
        "what this create does when one is active or queued",
    )
    on_conflict: OnConflict = Field(
        default="enqueue",
        description="With singleton_key: reject (409 naming the run), enqueue (run "
        "after it), cancel_active (cancel the running one, then start), replace_queued "
        "(end a queued, never started one `cancelled`, reason superseded)",
    )
    versioning: Versioning | None = Field(
        default=None,
        description="pinned: the run stays on the build that first claims it (resumes, "
        "retries and releases wait for that build's workers; POST /runs/{id}/upgrade moves "
        "it); auto_upgrade: any build may take it at each claim. Default: the handler's "
        "versioning, else LEASEHOLD_DEFAULT_VERSIONING",
    )
    priority: int = Field(
        default=0,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        strict=True,
        description="Higher starts first within its lane; ages (see README: a run is "
        "passed only by runs enqueued less than (their priority - its) x "
        "LEASEHOLD_PRIORITY_AGING_STEP_S after it)",
    )


class ResumeRequest(BaseModel):
    """Body of POST /runs/{id}/resume: what the person decided, for ctx.resume_input."""

    model_config = ConfigDict(extra="forbid")

    input: Any = None


class SignalRequest(BaseModel):
    """Body of POST /runs/{id}/signals/{name}: what the signal carries to the handler."""

    model_config = ConfigDict(extra="forbid")

    payload: Any = Field(
        default=None,
        description="Any JSON; ctx.wait_for_signal(name) returns it. At most "
        "LEASEHOLD_MAX_SIGNAL_BYTES encoded",
    )
    idempotency_key: str | None = Field(
        default=None,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Or the Idempotency-Key header: the same key again answers 200 with what "
        "became of the first signal and writes nothing; with another name or payload 409",
    )


class SignalResult(BaseModel):
    """Answer of POST /runs/{id}/signals/{name}: what became of the signal."""

    id: str
    name: str
    outcome: Literal["delivered", "buffered"] = Field(
        description="delivered: the run waited for it and is queued again; buffered: kept in "
        "the run's inbox, in order, for its next wait_for_signal of that name"
    )


class RetryRequest(BaseModel):
    """Body of POST /runs/{id}/retry (optional): how the re-run starts.

    ``checkpoint``: ``keep`` (default) starts the new run from the old run's last
    checkpoint (``ctx.state``, and effect numbering as of it); ``drop`` starts it from
    the beginning. Either way recorded effects are replayed, not called again.
    """

    model_config = ConfigDict(extra="forbid")

    checkpoint: CheckpointChoice = "keep"
    max_attempts: int | None = Field(
        default=None, ge=1, le=1000, strict=True, description="Default: the old run's"
    )
    idempotency_key: str | None = Field(default=None, pattern=IDEMPOTENCY_KEY_PATTERN)


class PriorityChange(BaseModel):
    """Body of PATCH /runs/{id}: what may change while a run waits."""

    model_config = ConfigDict(extra="forbid")

    priority: int = Field(ge=PRIORITY_MIN, le=PRIORITY_MAX, strict=True)


class QueuePage(BaseModel):
    """Answer of GET /queues: every declared queue, by name."""

    items: list[QueueInfo]
    max_queues: int = Field(description="LEASEHOLD_MAX_QUEUES: most PUT /queues may declare")


class StatusChange(BaseModel):
    """Answer of POST /runs/{id}/cancel, /resume, /resolve: the run's status afterwards."""

    id: str
    status: RunStatus


class HandlerInfo(BaseModel):
    """A registered handler and the JSON schema its input must satisfy."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="The handler's own defaults from @handler(...) (max_attempts, "
        "on_lease_expired, retry_backoff_s, retry_backoff_max_s, budget): a run's request "
        "overrides each, and each fills in for the deployment's setting",
    )


class WorkerDrain(BaseModel):
    """Answer of POST /workers/{id}/drain: the request is recorded for the worker."""

    id: str
    drain_requested: bool


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error response."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class CreateRunsRequest(BaseModel):
    """Body of POST /runs/batch: runs to create, each judged on its own."""

    model_config = ConfigDict(extra="forbid")

    items: list[CreateRunRequest] = Field(
        description="At most LEASEHOLD_BATCH_MAX_ITEMS; an item that is invalid is "
        "refused alone, in its place in the response"
    )


class CreateRunsItem(BaseModel):
    """One item's outcome: 201 created, 200 replayed (``run``), or a 4xx/503 ``problem``."""

    status: int
    run: Run | None = None
    problem: Problem | None = None


class CreateRunsResult(BaseModel):
    """Answer of POST /runs/batch: one outcome per requested run, in request order."""

    items: list[CreateRunsItem]


class RedisMemory(BaseModel):
    """Redis memory as the API's admission control sees it (the fullest primary)."""

    used_bytes: int
    max_bytes: int = Field(description="maxmemory; 0 when none is configured")
    high_water: float = Field(description="LEASEHOLD_MEMORY_HIGH_WATER, a fraction of max_bytes")
    creates_refused: bool = Field(
        description="True while POST /runs answers 503 admission-refused (past the high-water mark)"
    )


class ReadinessReport(BaseModel):
    """Body of GET /readyz, with 200 (ready) or 503 (not ready)."""

    status: Literal["ready", "unavailable"]
    redis_reachable: bool
    scripts_loaded: bool
    maxmemory_policy: str | None = None
    mode: Literal["single", "cluster", "sentinel"] = Field(
        default="single", description="How LEASEHOLD_REDIS_URL connects: its scheme decides"
    )
    topology: RedisTopology | None = Field(
        default=None, description="Nodes and roles, when Redis could be reached"
    )
    memory: RedisMemory | None = Field(
        default=None, description="Memory use and whether creates are refused, when readable"
    )
    problems: list[str] = Field(default_factory=list)


class RateLimitPage(BaseModel):
    """Answer of GET /rate-limits: every declared key and template, by name."""

    items: list[RateLimitInfo]
    max_rate_limits: int = Field(description="LEASEHOLD_MAX_RATE_LIMITS: most PUT may declare")


class ScheduleSpecFields(BaseModel):
    """When a schedule fires and what it does about overlaps and missed fires."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(
        default=None,
        max_length=256,
        description="Cron expression (5 fields, or 6 with seconds last), evaluated by cronsim "
        "in `timezone`; not with interval_s",
    )
    timezone: str | None = Field(
        default=None, max_length=64, description="IANA time zone of the cron expression (UTC)"
    )
    interval_s: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="Fire every this many seconds from the schedule's creation; at least "
        "LEASEHOLD_SCHEDULE_INTERVAL_MIN_S; not with cron",
    )
    overlap: Overlap | None = Field(
        default=None,
        description="A fire while the previous run has not ended: skip (default), allow, "
        "cancel_previous, buffer_one (keep one fire, start it when the previous ends)",
    )
    missed: MissedFires | None = Field(
        default=None,
        description="Fires missed while no reconciler ran: skip (default: only fires within "
        "LEASEHOLD_SCHEDULE_GRACE_S of now), latest (the newest one), all (each within the "
        "catch-up window, oldest first)",
    )
    catchup_window_s: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="How old a missed fire may be and still run (latest, all); default "
        "LEASEHOLD_SCHEDULE_CATCHUP_WINDOW_S, at most LEASEHOLD_SCHEDULE_CATCHUP_WINDOW_MAX_S",
    )
    paused: bool | None = Field(default=None, description="Paused: nothing fires, none missed")
    run: CreateRunRequest | None = Field(
        default=None,
        description="The run each fire creates: a POST /runs body without idempotency_key, "
        "run_at, delay_s or cancel_on_disconnect",
    )

    @model_validator(mode="after")
    def _one_spec(self) -> ScheduleSpecFields:
        if self.cron is not None and self.interval_s is not None:
            raise ValueError("give cron or interval_s, not both")
        _refuse_run_options_of_a_single_run(self.run)
        return self


class CreateScheduleRequest(ScheduleSpecFields):
    """Body of POST /schedules."""

    id: str = Field(pattern=SCHEDULE_ID_PATTERN, description="Your name for the schedule")

    @model_validator(mode="after")
    def _complete(self) -> CreateScheduleRequest:
        if self.cron is None and self.interval_s is None:
            raise ValueError("give cron or interval_s")
        if self.run is None:
            raise ValueError("give run: the run each fire creates")
        return self


class UpdateScheduleRequest(ScheduleSpecFields):
    """Body of PATCH /schedules/{id}: the fields given replace the schedule's.

    ``cron`` replaces an interval and ``interval_s`` a cron expression; ``run``
    replaces the whole run template (its queue cannot change). ``version``, when
    given, must be the schedule's current one (else 409), so two editors do not
    overwrite each other unseen.
    """

    version: int | None = Field(default=None, ge=1, le=SCRIPT_INT_MAX)


class SchedulePage(BaseModel):
    """One page of GET /schedules, by id; pass ``next_cursor`` back for the next."""

    items: list[Schedule]
    next_cursor: str | None = None


class TriggerRequest(BaseModel):
    """Body of POST /schedules/{id}/trigger (optional): fire now."""

    model_config = ConfigDict(extra="forbid")

    overlap: Overlap | None = Field(
        default=None, description="This fire's overlap policy (default: the schedule's)"
    )


class BackfillRequest(BaseModel):
    """Body of POST /schedules/{id}/backfill: fire every fire time in [start, end]."""

    model_config = ConfigDict(extra="forbid")

    start: AwareDatetime
    end: AwareDatetime
    overlap: Overlap | None = Field(
        default=None, description="The backfill's overlap policy (default: allow)"
    )

    @model_validator(mode="after")
    def _ordered(self) -> BackfillRequest:
        if self.end < self.start:
            raise ValueError("end is before start")
        return self


class FireResult(BaseModel):
    """What a trigger or backfill did: runs created, fires skipped, a fire buffered."""

    created: list[str] = Field(default_factory=list, description="Ids of the runs created")
    skipped: int = Field(
        default=0, description="Fires the overlap policy (or a run that exists already) dropped"
    )
    buffered: bool = Field(default=False, description="buffer_one holds this fire")
    cancelled: list[str] = Field(
        default_factory=list, description="Runs cancel_previous asked to stop"
    )


def _refuse_run_options_of_a_single_run(run: CreateRunRequest | None) -> None:
    """A schedule's run template makes many runs: options that name one run are refused."""
    if run is None:
        return
    for name in ("idempotency_key", "run_at", "delay_s"):
        if getattr(run, name) is not None:
            raise ValueError(f"run.{name} names one run; a schedule's runs cannot share it")
    if run.cancel_on_disconnect:
        raise ValueError("run.cancel_on_disconnect needs a request; a schedule has none")
    # the schedule's own overlap policy is its one-at-a-time rule; flow-control keys and
    # priorities are not carried by a schedule's runs yet, so they are refused, not dropped
    for name in ("concurrency_key", "singleton_key"):
        if getattr(run, name, None) is not None:
            raise ValueError(f"run.{name} is not supported on a schedule's runs (yet)")
    if getattr(run, "priority", 0):
        raise ValueError("run.priority is not supported on a schedule's runs (yet)")


class StreamTokenRequest(BaseModel):
    """``POST /runs/{id}/stream-token``: whether the token also reads the run's tree."""

    model_config = ConfigDict(extra="forbid")

    tree: bool = Field(
        default=False,
        description="Also allow `GET /runs/{id}/events?include=children` (the run's tree)",
    )


class StreamToken(BaseModel):
    """A short-lived signed token that reads one run's events (``?access_token=``)."""

    token: str = Field(description="Compact JWS (EdDSA), audience `leasehold-stream`")
    expires_at: datetime = Field(description="When the token stops being accepted (UTC)")


class LeaseView(BaseModel):
    """A run's lease now, by the Redis clock: what a gate's online check compares."""

    run_id: str
    queue: str
    status: str
    owner_id: str | None = Field(description="Who holds (or last held) the lease")
    fence: int = Field(description="Moves on every claim and takeover")
    held: bool = Field(description="Whether an owner holds the run now (expiry still ahead)")
    expires_at_ms: int | None = Field(description="Lease expiry, epoch ms (Redis clock)")
    now_ms: int = Field(description="The Redis clock when this was read, epoch ms")
