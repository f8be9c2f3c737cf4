"""Pydantic models shared by the API, the store and the client.

Times are timezone-aware UTC datetimes here (ISO-8601 in JSON) and epoch
milliseconds in Redis; the store converts at the boundary. What a worker never builds
lives beside this module and is imported from there: :mod:`app.models.api` (the API's
requests and answers) and :mod:`app.models.read` (what the API reads and the client
parses). This module imports neither.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel as PydanticModel
from pydantic import ConfigDict, Field

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
# and held lists in the Lua includes are built with them)
FLOW_KEY_PATTERN = r"^[A-Za-z0-9_.:@/\-]{1,128}$"
PRIORITY_MIN = -100
PRIORITY_MAX = 100
# the largest concurrency limit PUT /queues/{name}/limits takes
LIMIT_MAX = 1_000_000
# the largest integer a request may carry to Redis when nothing smaller bounds it (versions,
# step budgets): a Lua number is a double, exact to 2^53, and a script's int_arg takes at
# most 16 digits, so a version past it was a 503 and a traceback, not Redis's int64
SCRIPT_INT_MAX = 2**53 - 1
OnConflict = Literal["reject", "enqueue", "cancel_active", "replace_queued"]
RUN_ID = re.compile(RUN_ID_PATTERN)
HANDLER_NAME = re.compile(HANDLER_NAME_PATTERN)
FLOW_KEY = re.compile(FLOW_KEY_PATTERN)
# A rate-limit key: segments of letters, digits, `_`, `.`, `-`, joined by `:`
# (`openai`, `crm:acme`). A template names a segment `{name}` to stand for any one
# segment (`crm:{tenant}` covers `crm:acme`, not `crm:acme:eu`). No `{`/`}` in a key
# itself: a handler bucket's Redis key puts it inside a hash tag. A template's first
# segment is fixed: `{t}` alone would make a limit of every key anyone names.
RATE_LIMIT_KEY_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}(:[A-Za-z0-9_.\-]{1,64}){0,3}$"
RATE_LIMIT_TEMPLATE_PATTERN = (
    r"^[A-Za-z0-9_.\-]{1,64}(:([A-Za-z0-9_.\-]{1,64}|\{[a-z_]{1,32}\})){0,3}$"
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
# deploys (issue 36): pinned keeps a run on the build that first claimed it; auto_upgrade
# lets any build's worker take it at each claim (the drift check guards the replay)
Versioning = Literal["pinned", "auto_upgrade"]


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
    build_id: str | None = Field(
        default=None,
        description="The build of the worker that claimed the current (or last) attempt",
    )
    versioning: Versioning = Field(
        default="auto_upgrade",
        description="pinned: only workers of pinned_build may claim it; auto_upgrade: any",
    )
    pinned_build: str | None = Field(
        default=None,
        description="The build a pinned run is held to (its first claim's, or an upgrade's)",
    )
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
        description="While waiting (or waiting_human on ctx.ask_human): what the parked run "
        "waits for (kind sleep, signal, join or human; subject: the sleep's or signal's name, "
        "the join's mode or the question's name; step; until_ms: when it wakes anyway, if "
        "ever; since_ms). The kinds and their words: /console/assets/wait_kinds.json",
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
        "k:<concurrency key>, s:<singleton key>, b:<build> for a pinned run with no live "
        "worker of its build), as the last `wait` event says",
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


class RunBudget(BaseModel):
    """Run-level budgets, each failing with its own typed, non-retryable error."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(
        default=None, ge=1, le=SCRIPT_INT_MAX, description="ctx.step() calls allowed"
    )
    max_duration_s: float | None = Field(
        default=None, gt=0, description="Wall time one attempt may take, progress or not"
    )


RETRYABLE_STATUSES = frozenset(
    {RunStatus.FAILED, RunStatus.ORPHANED, RunStatus.CANCELLED, RunStatus.EXPIRED}
)
CheckpointChoice = Literal["keep", "drop"]


ERROR_CODE_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
OPERATION_ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"


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
    build_id: str | None = Field(
        default=None, description="The code it runs (LEASEHOLD_BUILD_ID, or its handlers' hash)"
    )
    alive: bool = Field(
        default=True,
        description="Heartbeat seen within one (its own) lease TTL; a dead worker's runs are being "
        "reconciled, and it leaves the list when its advertisement expires",
    )


SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
Overlap = Literal["skip", "allow", "cancel_previous", "buffer_one"]
MissedFires = Literal["skip", "latest", "all"]
