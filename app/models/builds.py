"""The builds API's models (issue 36): what a build still holds, and moving runs off it."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from app.builds import BUILD_ID_PATTERN
from app.models import HANDLER_NAME_PATTERN, QUEUE_NAME_PATTERN, BaseModel

# the most runs one POST /builds/{id}/upgrade moves; call again for more
MAX_UPGRADE_RUNS = 10_000


class PinnedCounts(BaseModel):
    """A build's open pinned runs by what they are doing."""

    queued: int = Field(description="In the build's lanes, waiting for one of its workers")
    running: int = Field(description="Held by a worker now (running or cancelling)")
    parked: int = Field(
        description="Waiting (sleep, signal, join), waiting for a person, or for reconciliation"
    )
    estimated: bool = Field(
        default=False,
        description="A queue held more than 1000 of them: the split is scaled from a random "
        "sample (the sum is exact)",
    )


class BuildInfo(BaseModel):
    """One build: its live workers and the runs that need it.

    ``drained`` is true when no open run is pinned to it: its workers can be stopped
    without stranding anything (runs that are not pinned move to another build at
    their next claim).
    """

    build_id: str
    workers: list[str] = Field(description="Ids of its live workers (GET /workers)")
    draining_workers: int = Field(description="Of those, how many stopped claiming")
    running_now: int = Field(
        description="Runs its workers execute now, pinned or not (their advertised count)"
    )
    pinned: PinnedCounts
    unavailable: int = Field(
        description="Queued pinned runs that no live, claiming worker of the build can take "
        "(each has a `wait` event, kind build_unavailable)"
    )
    drained: bool


class UpgradeRun(BaseModel):
    """Body of POST /runs/{id}/upgrade: which build takes the run from now on."""

    model_config = ConfigDict(extra="forbid")

    build_id: str | None = Field(
        default=None,
        pattern=BUILD_ID_PATTERN,
        description="Pin it to this build; absent: to none (the next claim, by any build, "
        "pins it again)",
    )


class UpgradeBuild(BaseModel):
    """Body of POST /builds/{id}/upgrade: move that build's pinned runs, by filter."""

    model_config = ConfigDict(extra="forbid")

    to_build_id: str | None = Field(
        default=None, pattern=BUILD_ID_PATTERN, description="As POST /runs/{id}/upgrade"
    )
    queue: str | None = Field(default=None, pattern=QUEUE_NAME_PATTERN)
    handler: str | None = Field(default=None, pattern=HANDLER_NAME_PATTERN)
    limit: int = Field(default=1000, ge=1, le=MAX_UPGRADE_RUNS, strict=True)


class UpgradeSummary(BaseModel):
    """What one bulk upgrade moved; ``remaining`` runs are still pinned to the build."""

    build_id: str
    upgraded: int
    remaining: int
