"""The drain: how a worker stops without losing a run.

SIGTERM or SIGINT (:func:`install_signal_handlers`), or ``POST /workers/{id}/drain``
seen by the heartbeat's advertisement, asks a worker to stop; it then drains
(:func:`drain`): it stops claiming, sends its prefetched runs back to the queue at
once, lets its running runs finish for ``drain_timeout_s``, then interrupts the rest
and releases them (fence+1, event ``released``) so another worker takes them at
once, waiting ``SETTLE_AFTER_DRAIN_S`` at most for those releases to be written. A
second signal cuts the drain short (``Worker.request_stop``).

A stop grace period (Kubernetes, Compose) must outlast ``drain_timeout_s`` plus
``SETTLE_AFTER_DRAIN_S``, or the releases are cut off (``tests/deploy`` holds the
manifests to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from app.executor.reasons import StopReason

if TYPE_CHECKING:
    from app.executor.courier import Courier
    from app.executor.execution import RunExecution

# the drain's lines are the worker's, under its logger's name (which operators filter on)
log = logging.getLogger("app.executor.worker")

SETTLE_AFTER_DRAIN_S = 10.0


def install_signal_handlers(request_stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call ``request_stop`` on the running loop, where it can take them.

    Windows event loops have no ``add_signal_handler`` (NotImplementedError), and a loop
    outside the main thread cannot take one (RuntimeError): there the default handlers
    stay, and a stop skips the drain.
    """
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, request_stop)


async def drain(
    executions: Mapping[str, RunExecution],
    couriers: Collection[Courier],
    *,
    timeout_s: float,
) -> None:
    """Stop claiming, let running runs finish for ``timeout_s``, release the rest.

    ``executions`` is the worker's live table (each run leaves it as it settles), so
    what is still in it after ``timeout_s`` is what must be released. Returns once every
    courier has withdrawn its hand-off registration.
    """
    log.info("draining: %d runs in flight, up to %.1fs", len(executions), timeout_s)
    for courier in couriers:
        courier.stop_claiming()
    prefetched = [run_id for run_id, execution in executions.items() if not execution.started]
    for run_id in prefetched:  # back to the queue now, not after the drain
        executions[run_id].stop(StopReason.DRAIN)
    # what a drain lets finish: the runs that started (a prefetched one is released, and
    # counted so, even when its release is written before the wait below ends)
    in_flight = set(executions) - set(prefetched)
    await _wait_for_executions(executions, timeout_s)
    finished = sorted(in_flight - set(executions))
    for run_id in finished:
        log.info("drain: run %s finished", run_id)
    left = [execution for execution in executions.values() if execution.started]
    for execution in left:
        execution.stop(StopReason.DRAIN)  # each says "run released" once its release is written
    await _wait_for_executions(executions, SETTLE_AFTER_DRAIN_S)
    for courier in couriers:
        await courier.withdraw()
    log.info(
        "drained: %d finished, %d released (%d of them prefetched, never started)",
        len(finished),
        len(left) + len(prefetched),
        len(prefetched),
    )


async def _wait_for_executions(executions: Mapping[str, RunExecution], timeout_s: float) -> None:
    """Until ``executions`` is empty (or holds no task yet), ``timeout_s`` at most."""
    deadline = time.monotonic() + timeout_s
    while executions and time.monotonic() < deadline:
        tasks = [e.task for e in executions.values() if e.task is not None]
        if not tasks:
            return
        await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
