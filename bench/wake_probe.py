"""Wall-clock stamps along a worker's wake → handler path (for :mod:`bench.latency_steps`).

Loaded into a benchmark worker as a handler module (``LEASEHOLD_HANDLERS=...,bench.wake_probe``),
it wraps the methods a run's start passes through and records ``(step, time, detail)``
tuples, written as JSON to ``LEASEHOLD_BENCH_PROBE_OUT`` when the worker exits. The
wrappers cost ~1 µs each; the same probe in a before and an after checkout makes the
per-step figures comparable. Also recorded: every GC pass, reconciler scan and outbox
sweep, so a slow start can be matched with what ran beside it. Never loaded outside
benchmarks.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import time
from collections.abc import Callable
from typing import Any

from app.executor import courier, execution, inbox, listener, worker
from app.reconciler import reconciler
from app.store.family import outbox
from app.store.leases import store as leases
from app.store.lua import scripts

OUT_ENV = "LEASEHOLD_BENCH_PROBE_OUT"
EVENTS: list[tuple[str, float, str]] = []
_WALL0, _PERF0 = time.time(), time.perf_counter()


def now() -> float:
    """Epoch seconds at perf_counter resolution (``time.time()`` is coarser on some hosts)."""
    return _WALL0 + (time.perf_counter() - _PERF0)


def stamp(step: str, detail: str = "") -> None:
    """Record one step."""
    EVENTS.append((step, now(), detail))


@atexit.register
def _dump() -> None:
    path = os.environ.get(OUT_ENV)
    if path:
        with open(path, "w") as out:
            json.dump(EVENTS, out)


def _wrap_sync(cls: Any, name: str, before: str, after: str = "") -> None:
    original: Callable[..., Any] = getattr(cls, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        detail = _run_id(self, args)
        stamp(before, detail)
        result = original(self, *args, **kwargs)
        if after:
            stamp(after, detail)
        return result

    setattr(cls, name, wrapper)


def _wrap_async(cls: Any, name: str, before: str, after: str = "") -> None:
    original: Callable[..., Any] = getattr(cls, name)

    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        detail = _run_id(self, args)
        stamp(before, detail)
        result = await original(self, *args, **kwargs)
        if after:
            stamp(after, detail)
        return result

    setattr(cls, name, wrapper)


def _run_id(owner: Any, args: tuple[Any, ...]) -> str:
    claimed = getattr(owner, "claimed", None)
    if claimed is None and args and hasattr(args[0], "lease"):
        claimed = args[0]
    return str(claimed.id) if claimed is not None else ""


def _gc_pass(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        EVENTS.append(("zgc", now(), str(info["generation"])))
    else:
        EVENTS.append(("zgc_end", now(), str(info["generation"])))


def _loop_seen(self: Any, channel: str, data: str) -> Any:
    if not any(step == "zloop" for step, _, _ in EVENTS):
        EVENTS.append(("zloop", now(), type(asyncio.get_running_loop()).__module__))
    stamp("a_dispatch")
    return _dispatch(self, channel, data)


def _registration_seen(self: Any, registration: Any, claim: Any, *rest: Any) -> Any:
    kept = _registration_answered(self, registration, claim, *rest)
    # how many hand-offs the new registration is good for (a bool before it had a count)
    EVENTS.append(("zreg", now(), str(int(claim.registered))))
    return kept


_registration_answered = courier.Courier._registration_answered
courier.Courier._registration_answered = _registration_seen  # type: ignore[method-assign]
_dispatch = listener.ChannelListener._dispatch
listener.ChannelListener._dispatch = _loop_seen  # type: ignore[method-assign]
_wrap_async(courier.Courier, "_trip", "b_courier_woke")
_trip = courier.Courier._trip


async def _trip_seen(self: Any, batch: Any, token: str, wanted: int, **kwargs: Any) -> Any:
    # what each round trip carried: outcomes, slots claimed, the registration
    detail = f"{len(batch)} {wanted} {kwargs.get('registration')}"
    EVENTS.append(("ztrip", now(), detail))
    try:
        return await _trip(self, batch, token, wanted, **kwargs)
    finally:
        EVENTS.append(("ztrip_end", now(), detail))


courier.Courier._trip = _trip_seen  # type: ignore[method-assign]
# the hand-off: a row read from the inbox (its own path to _start_run, no wake, no claim)
_wrap_async(inbox.HandoffInbox, "_take", "a_inbox")
_wrap_async(leases.LeaseStore, "finish_and_claim", "c_claim_call", "f_claim_parsed")
_wrap_async(scripts.Scripts, "_round_trip", "d_sent", "e_reply")
_wrap_sync(worker.Worker, "_start_run", "g_start_run", "h_task_created")
# the run's task starts in _run (run() only wraps it in the attempt's span when tracing
# is on); _call is a plain function returning the handler's awaitable (17be9bf)
_wrap_async(execution.RunExecution, "_run", "i_task_runs")
_wrap_sync(execution.RunExecution, "_call", "j_call")
_wrap_async(reconciler.Reconciler, "scan", "zscan", "zscan_end")
_wrap_async(outbox.Outbox, "sweep", "zsweep", "zsweep_end")
gc.callbacks.append(_gc_pass)
