"""The models a worker never builds: what the API and the client read, and the API's store requests.

Runs' pages, queues' and rate limits' reports, schedules, bulk retries, purges, Redis's
topology, the activity feed: the API answers with them and the client parses them, but
a worker claims, runs and finishes runs without any of them. They were in
:mod:`app.models`, which every process imports; creating a pydantic class costs even
with its validator deferred, and a worker's start-up is time before its first claim
(issue 19 aim 2), so they live here: import them from :mod:`app.models.read`
(``from app.models.read import RunPage``); :mod:`app.models` does not import this module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator

from app.models import (
    ERROR_CODE_PATTERN,
    FLOW_KEY,
    HANDLER_NAME,
    HANDLER_NAME_PATTERN,
    LIMIT_MAX,
    QUEUE_NAME_PATTERN,
    TERMINAL_STATUSES,
    BaseModel,
    CheckpointChoice,
    MissedFires,
    Overlap,
    Run,
    RunStatus,
)


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


ResolveAction = Literal["retry", "fail", "succeed"]
EffectOutcomeDecision = Literal["applied", "not_applied"]


class ResolveRequest(BaseModel):
    """Body of POST /runs/{id}/resolve: a person's decision on a reconciliation_required run.

    ``effect_outcome`` says what the person found out about the effects whose
    outcome was unknown: ``applied`` records them as done (with ``effect_result``,
    else null), so a retried run does not repeat them; ``not_applied`` drops their
    records, so a retried run performs them again. A retry of a run parked for
    unknown effects needs it (422 otherwise: it would stop at the same effect again);
    a run parked for ``version_drift`` is retried without it, on the code it meets.
    """

    model_config = ConfigDict(extra="forbid")

    action: ResolveAction = Field(
        description="retry: queue the run again (fence+1); fail / succeed: end it so"
    )
    output: Any = Field(default=None, description="The run's output, for succeed")
    effect_outcome: EffectOutcomeDecision | None = Field(
        default=None,
        description="Whether the unknown effects happened; required to retry a run parked "
        "for unknown effects",
    )
    effect_result: Any = Field(
        default=None, description="Result to record for the effects, with effect_outcome=applied"
    )
    note: str | None = Field(
        default=None, max_length=2000, description="Why, for the run's event history"
    )
    upgrade: bool = Field(
        default=False,
        description="With retry: first move a pinned run off its build, as POST "
        "/runs/{id}/upgrade does, so whichever build claims it next runs it (needs the "
        "operate role)",
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> ResolveRequest:
        if self.output is not None and self.action != "succeed":
            raise ValueError("output is only accepted with action succeed")
        if self.upgrade and self.action != "retry":
            raise ValueError("upgrade is only accepted with action retry")
        if self.effect_result is not None and self.effect_outcome != "applied":
            raise ValueError("effect_result is only accepted with effect_outcome applied")
        return self


RetryableStatus = Literal["failed", "orphaned", "cancelled", "expired"]
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
    truncated: Literal["scan_budget"] | None = Field(
        default=None,
        description="`scan_budget`: the page ended because the listing read "
        "LEASEHOLD_LIST_SCAN_BUDGET_BYTES or looked at LEASEHOLD_LIST_SCAN_BUDGET_RUNS runs, "
        "not because nothing else matches: follow `next_cursor` (it may give empty pages "
        "before the next match). null: a full page, or the last one",
    )


class QueueInfo(BaseModel):
    """One declared queue as GET /queues reports it, read from Redis at one moment."""

    name: str
    configured: bool = Field(
        description="named in this API's LEASEHOLD_QUEUES (else declared by a worker's "
        "configuration or by PUT /queues/{name})"
    )
    ready: int = Field(description="runs waiting to be claimed")
    running: int = Field(description="runs whose lease is held (running or cancelling)")
    delayed: int = Field(
        description="runs waiting for a time that is not their own wait's: retry backoff, a "
        "delayed start (run_at / delay_s), a rate limit's start gate or 429 release"
    )
    waiting: int = Field(
        default=0,
        description="runs parked (status waiting, no lease) on a durable wait: ctx.sleep, "
        "ctx.wait_for_signal, ctx.join; a wait whose time came is in `ready` instead",
    )
    parked: int = Field(description="waiting_human and reconciliation_required runs")
    oldest_queued_age_s: float = Field(description="age of the run at the head of the line")
    flow: QueueFlow | None = Field(
        default=None, description="limits, slots and the busiest keys (GET /queues/{name})"
    )
    build_unavailable: dict[str, int] | None = Field(
        default=None,
        description="ready runs pinned to a build no live, claiming worker of the queue has, "
        "by build (GET /queues/{name}; each run has a `wait` event, kind build_unavailable)",
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
