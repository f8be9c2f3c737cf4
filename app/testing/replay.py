"""``replay(history, handler)``: will new handler code take the steps a recorded run took?

A run parked for days wakes on whatever code is deployed then, and is re-executed from
the top (from its last checkpoint), its steps matched by position against the ones it
recorded (:mod:`app.executor.effects`, the drift check). ``replay`` does that wake in
your CI, in-process and with no side effects: export a run's history
(``leasehold runs export RUN_ID -o run.json``, ``GET /runs/{id}/history`` or
``Client.history``), then::

    from app.testing import replay
    report = replay("run.json", my_handler)   # the @handler-decorated function
    assert report.ok, report.drift

How, and why it reports exactly what a live wake would: the handler gets the real
:class:`~app.executor.RunContext` over the worker's own helpers (the effect ledger
with its drift check, the durable waits, spawns and joins, the event sink), built as a
claim would build them (``ctx.state`` is the last checkpoint's, the step numbering and
the comparison start at its position). Only the stores under them are replaced, by
ones that answer from the history (:mod:`app.testing.history_stores`) and write
nothing: an effect returns its recorded result and its function is never called, a
wait returns its recorded outcome, a spawn its recorded child, a join its children's
recorded ends, ``ctx.patched`` the run's recorded decision. So there is one drift
rule, the ledger's, and a drift is the same :class:`~app.errors.VersionDrift` with the
same ``details`` (position, recorded, taken, both sequences) the live run would park
with. The first step the history holds no outcome for is where the run would go on
live: the replay stops there, successfully (``stopped_at``). ``ctx.rate_limit`` and
``ctx.lease_token`` reach live services: a replay refuses them
(:class:`ReplayUnsupported`) rather than call them.

A history is checked before anything runs: malformed JSON, an unknown ``version``,
fields of the wrong shape or a document over :data:`MAX_HISTORY_BYTES` raise
``ValueError`` saying what is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import ValidationError

from app.errors import LeaseholdError, VersionDrift
from app.executor.children import Family, FamilyDeps
from app.executor.context import HelperDeps, RunContext, RunHelpers
from app.executor.effects import EffectLedger
from app.executor.helper_stores import HelperStores
from app.executor.lease_tokens import LeaseTokens
from app.executor.rates import RateLimiter
from app.executor.reasons import RunParked
from app.executor.waits import Waits
from app.handlers import AnyInput, HandlerFn, HandlerRegistry, HandlerSpec, default_registry
from app.models.history import HISTORY_VERSION, RunHistory
from app.settings import Settings
from app.store.family.children import ChildStore, SpawnLimits
from app.store.leases.store import ClaimedRun, Lease, LeaseStore
from app.store.progress.store import ProgressStore
from app.store.queues.store import QueueStore
from app.store.waits.store import WaitStore
from app.supervision.config import Supervision
from app.testing.history_stores import (
    HistoryChildren,
    HistoryEvents,
    HistoryProgress,
    HistoryQueues,
    HistoryWaits,
    ReplayFrontier,
)

# the largest history document replay reads (a file, text or bytes)
MAX_HISTORY_BYTES = 64 * 1024 * 1024
REPLAY_OWNER = "replay"
# as the deployment's defaults (a replay's bounds are the live ones: nothing is refused
# here that a worker would take)
_MAX_EVENT_BYTES = 64 * 1024
_MAX_CHECKPOINT_BYTES = 1024 * 1024

Outcome = Literal["completed", "stopped", "drift", "failed"]


class ReplayUnsupported(LeaseholdError):
    """The handler used a helper that reaches a live service (a rate limit, a lease
    token, a supervised operation): a replay never calls one."""


@dataclass(frozen=True)
class ReplayReport:
    """What replaying a run's history against a handler found.

    ``outcome``: ``completed`` (the handler returned, every recorded step taken in
    order), ``stopped`` (it reached ``stopped_at``, a step the history holds no outcome
    for: the run would go on live from there), ``drift`` (``drift`` is the
    :class:`~app.errors.VersionDrift` the live run would park with), ``failed`` (the
    handler raised ``error`` on the recorded outcomes, as the run would live).
    """

    run_id: str
    handler: str
    outcome: Outcome
    steps: list[str]  # the steps the handler took, '<kind>|<field>', in order
    recorded: list[str]  # the steps the history holds, by position
    stopped_at: str | None = None
    drift: VersionDrift | None = None
    error: BaseException | None = None
    output: Any = None
    events: list[tuple[str, Any]] = field(default_factory=list)  # what the handler emitted

    @property
    def ok(self) -> bool:
        """True unless the code drifted from the history."""
        return self.drift is None


def load_history(source: RunHistory | dict[str, Any] | str | bytes | Path) -> RunHistory:
    """A history from a model, a dict, JSON text or bytes, or a file path (``Path``).

    Raises ``ValueError`` saying what is wrong: not JSON, too large, an unknown
    version, a field of the wrong shape.
    """
    if isinstance(source, RunHistory):
        return source
    if isinstance(source, Path):
        size = source.stat().st_size
        _check_size(size)
        source = source.read_bytes()
    if isinstance(source, str | bytes):
        _check_size(len(source))
        try:
            source = json.loads(source)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"the history is not JSON: {exc}") from None
    if not isinstance(source, dict):
        raise ValueError(f"a history is a JSON object; got {type(source).__name__}")
    version = source.get("version")
    if version != HISTORY_VERSION:
        raise ValueError(
            f"history version {version!r} is not one this Leasehold reads ({HISTORY_VERSION})"
        )
    try:
        return RunHistory.model_validate(source)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ValueError(f"the history is malformed: {problems}") from None


def _check_size(size: int) -> None:
    if size > MAX_HISTORY_BYTES:
        raise ValueError(f"the history is {size} bytes; replay reads at most {MAX_HISTORY_BYTES}")


def replay(
    history: RunHistory | dict[str, Any] | str | bytes | Path, handler: HandlerFn
) -> ReplayReport:
    """Replay ``history`` against ``handler`` (see the module docstring); blocks.

    In a running event loop, await :func:`replay_async` instead.
    """
    return asyncio.run(replay_async(history, handler))


async def replay_async(
    history: RunHistory | dict[str, Any] | str | bytes | Path, handler: HandlerFn
) -> ReplayReport:
    """:func:`replay` as a coroutine. Raises ``ValueError`` for a bad history."""
    recorded_history = load_history(history)
    spec = _spec_of(recorded_history.run.handler, handler)
    helpers = _ReplayHelpers(recorded_history)
    ctx = RunContext(helpers.claimed, helpers=helpers, loop=asyncio.get_running_loop())
    run = recorded_history.run
    outcome: Outcome = "completed"
    result: dict[str, Any] = {}
    try:
        params = spec.parse_input(run.input)
        result["output"] = await _call(spec, ctx, params)
        await helpers.check_steps_taken()
    except ReplayFrontier as frontier:
        outcome, result["stopped_at"] = "stopped", frontier.step
    except VersionDrift as drift:
        outcome, result["drift"] = "drift", drift
    except RunParked as parked:  # a recorded cancel: the run was stopped there live too
        outcome, result["stopped_at"] = "stopped", str(parked)
    except Exception as exc:  # the handler's own failure on the recorded outcomes
        outcome, result["error"] = "failed", exc
    return ReplayReport(
        run_id=run.id,
        handler=run.handler,
        outcome=outcome,
        steps=helpers.ledger.steps_taken,
        recorded=[step or "" for step in recorded_history.steps],
        events=[(kind, json.loads(data)) for kind, data in helpers.events.emitted],
        **result,
    )


async def _call(spec: HandlerSpec, ctx: RunContext, params: Any) -> Any:
    if spec.is_async:
        return await spec.fn(ctx, params)
    # a sync handler's ctx.*_sync hand their coroutines to this loop, as on a worker
    return await asyncio.get_running_loop().run_in_executor(None, spec.fn, ctx, params)


def _spec_of(name: str, fn: HandlerFn) -> HandlerSpec:
    """The handler as a worker registers it (its input model and defaults)."""
    for spec in default_registry:
        if spec.fn is fn:
            found: HandlerSpec = spec
            return found
    if not callable(fn):
        raise ValueError(f"the handler must be a function; got {type(fn).__name__}")
    return HandlerRegistry().register(name, fn)


class _AnyChildren(HandlerRegistry):
    """The registry a replayed spawn checks its child against: the registered handler's
    model when this process has it, else any JSON object (the child ran elsewhere)."""

    def get(self, name: str) -> HandlerSpec:
        with contextlib.suppress(LeaseholdError):
            return default_registry.get(name)
        return HandlerSpec(name, _no_handler, True, AnyInput, None)


async def _no_handler(ctx: Any, params: Any) -> None:
    """Never called: a replayed spawn creates nothing."""


class _ReplayHelpers(RunHelpers):
    """A run's helpers as a claim builds them, over stores answering from a history."""

    def __init__(self, history: RunHistory) -> None:
        run = history.run
        settings = Settings()
        self.events = HistoryEvents()
        deps = HelperDeps(
            lease_store=cast(LeaseStore, self.events),
            stores=cast(HelperStores, None),
            rate_limit_max_wait_ms=0,
            supervision=Supervision.from_settings(settings),
            max_event_bytes=_MAX_EVENT_BYTES,
            max_checkpoint_bytes=_MAX_CHECKPOINT_BYTES,
            family=functools.partial(_family_deps, history),
        )
        lease = Lease(run.queue, run.id, REPLAY_OWNER, 0)
        claimed = ClaimedRun(
            lease, run.handler, run.input, run.attempt, run.attempt, run.state, run.resume_input
        )
        super().__init__(claimed, deps, stop=_ignore, interrupt=_ignore, trace_parent=None)
        self._history = history

    @functools.cached_property
    def ledger(self) -> EffectLedger:
        return EffectLedger(
            cast(ProgressStore, HistoryProgress(self._history)),
            self.claimed.lease,
            sink=self.sink,
            max_bytes=self.deps.max_checkpoint_bytes,
            on_lost=_none,
            on_parked=_none,
        )

    @functools.cached_property
    def waits(self) -> Waits:
        return Waits(
            cast(WaitStore, HistoryWaits(self._history)),
            self.claimed.lease,
            ledger=self.ledger,
            sink=self.sink,
            max_wait_s=self.deps.max_wait_s,
            max_question_bytes=self.deps.max_event_bytes,
            on_stop=_ignore,
        )

    @functools.cached_property
    def family(self) -> Family:
        deps = self.deps.family
        assert deps is not None  # built with one above
        return Family(
            deps(), self.claimed.lease, ledger=self.ledger, sink=self.sink, on_stop=_ignore
        )

    @functools.cached_property
    def rates(self) -> RateLimiter:
        raise ReplayUnsupported("ctx.rate_limit takes tokens from a live bucket: not replayed")

    @functools.cached_property
    def lease_tokens(self) -> LeaseTokens:
        raise ReplayUnsupported("ctx.lease_token signs with live keys: not replayed")


def _family_deps(history: RunHistory) -> FamilyDeps:
    return FamilyDeps(
        store=cast(ChildStore, HistoryChildren(history)),
        queues=cast(QueueStore, HistoryQueues()),
        registry=_AnyChildren(),
        limits=SpawnLimits(),
        max_input_bytes=_MAX_CHECKPOINT_BYTES,
        max_metadata_bytes=_MAX_EVENT_BYTES,
        default_max_attempts=1,
        default_on_lease_expired="orphan",
        default_versioning="auto_upgrade",
    )


def _ignore(reason: Any) -> None:
    """A replay has no lease to give up and no run to stop."""


def _none() -> None:
    """As :func:`_ignore`, for the callbacks that take no reason."""
