"""Namespaces (tenants) and their quotas, as ``/namespaces`` takes and shows them.

Every quota is optional: an absent one is no limit beyond the deployment's own bounds
(LEASEHOLD_MAX_QUEUES, LEASEHOLD_MAX_SCHEDULES, the memory mark...). A quota is checked
where its resource is written, and a refusal is ``429`` with ``Retry-After`` and a
problem naming the quota (``app.api.quotas``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict, Field

from app.models import SCRIPT_INT_MAX, BaseModel
from app.namespaces import NAMESPACE_PATTERN

# a rate quota's most, per second: past it the bucket's interval rounds to 0 ms
RATE_QUOTA_MAX = 100_000
COUNT_QUOTA_MAX = 10_000_000


class Quotas(BaseModel):
    """What one namespace may hold and how fast it may write."""

    model_config = ConfigDict(extra="forbid")

    stored_bytes: int | None = Field(
        default=None,
        ge=1,
        le=SCRIPT_INT_MAX,
        description="Bytes its runs may keep in Redis (records, events, effects), as last "
        "estimated (GET /namespaces/{name}): past it creates get 429",
    )
    live_runs: int | None = Field(
        default=None,
        ge=1,
        le=COUNT_QUOTA_MAX,
        description="Runs not yet ended (queued, delayed, running, parked): past it creates, "
        "re-runs and schedule fires get 429",
    )
    creates_per_s: int | None = Field(
        default=None,
        ge=1,
        le=RATE_QUOTA_MAX,
        description="Runs created per second (API, batch, re-runs, schedule triggers), with "
        "a burst of one second's worth",
    )
    schedules: int | None = Field(default=None, ge=0, le=COUNT_QUOTA_MAX)
    queues: int | None = Field(default=None, ge=0, le=COUNT_QUOTA_MAX)
    signals_per_s: int | None = Field(
        default=None,
        ge=1,
        le=RATE_QUOTA_MAX,
        description="Signals sent to its runs per second, with a burst of one second's worth",
    )
    listings_in_flight: int | None = Field(
        default=None,
        ge=1,
        le=COUNT_QUOTA_MAX,
        description="GET /runs calls one API process serves for it at once (a search reads "
        "up to LEASEHOLD_LIST_SCAN_BUDGET_BYTES): one more gets 429 at once",
    )


class NamespaceSpec(BaseModel):
    """``PUT /namespaces/{name}``: the namespace's quotas (all of them: a PUT replaces)."""

    model_config = ConfigDict(extra="forbid")

    quotas: Quotas = Field(default_factory=Quotas)


class Usage(BaseModel):
    """What a namespace holds now, as the quotas see it."""

    live_runs: int
    stored_bytes: int = Field(description="An estimate: sampled record sizes times counts")
    queues: int
    schedules: int
    measured_at: datetime


class Namespace(BaseModel):
    """A namespace as ``GET /namespaces/{name}`` shows it."""

    name: str = Field(pattern=NAMESPACE_PATTERN)
    quotas: Quotas
    created_at: datetime | None = Field(
        default=None, description="None for `default`, which always exists"
    )
    usage: Usage | None = None


class NamespacePage(BaseModel):
    """``GET /namespaces``: every namespace, ``default`` first."""

    items: list[Namespace]
