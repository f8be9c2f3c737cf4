"""A worker process: how many runs it executes, how it claims them, its handlers, its drain."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from app.builds import BUILD_ID_PATTERN
from app.settings.group import DAY_S, HOUR_S, CommaList, SettingsGroup

# the demo's handlers and its fake model route: a client of the demo can burn a worker's CPU
# and hold connections, so it is on only where LEASEHOLD_HANDLERS names it (`leasehold up`)
DEMO_HANDLERS = "app.demo"


class WorkerSettings(SettingsGroup):
    """A worker: concurrency, claiming, handlers, draining."""

    concurrency: int = Field(
        default=16, ge=1, le=100_000, description="Runs one worker process executes at once"
    )
    build_id: str | None = Field(
        default=None,
        pattern=BUILD_ID_PATTERN,
        description="The worker's build, recorded on every run it claims (GET /workers, a "
        "run's build_id); unset: a hash of its handler modules' sources",
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
    app_dir: Path = Field(
        default=Path("."),
        description="Directory put first on sys.path before LEASEHOLD_HANDLERS is imported "
        "(as uvicorn's --app-dir): your handler package is found where you start the "
        "process; `leasehold up` hands its children the absolute path",
    )
    drain_timeout_s: float = Field(
        default=30.0,
        ge=0,
        le=DAY_S,
        allow_inf_nan=False,
        description="On SIGTERM, how long running runs may finish before being released",
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

    @field_validator("handlers")
    @classmethod
    def _check_module_names(cls, value: list[str]) -> list[str]:
        for module in value:
            if not all(part.isidentifier() for part in module.split(".")):
                # shown before any import: a path or `module:function` would only fail later,
                # as a stranger ImportError (or a TypeError for a leading dot)
                raise ValueError(
                    "not module names: dotted Python names, comma-separated "
                    "(mypkg.handlers), not a path or module:function"
                )
        return value

    @property
    def demo_enabled(self) -> bool:
        """The demo is on: LEASEHOLD_HANDLERS names app.demo (or one of its modules)."""
        return any(
            module == DEMO_HANDLERS or module.startswith(f"{DEMO_HANDLERS}.")
            for module in self.handlers
        )
