"""The worker's event loop: uvloop where it is installed, the standard loop otherwise.

The enqueue→start path is a handful of loop passes and socket reads and writes per
run (a wake message, a claim sent, its reply, the run's task); uvloop's libuv loop
and transports do each of them in C, so the same path takes fewer microseconds
(BENCHMARKS.md, "Enqueue→start latency"). Nothing the worker relies on changes:
signal handlers (``add_signal_handler``), ``call_soon_threadsafe`` from the
heartbeat thread, ``run_in_executor`` for sync handlers and ``asyncio.timeout``
behave the same on both loops. ``LEASEHOLD_WORKER_EVENT_LOOP=asyncio`` keeps the
standard loop; where uvloop cannot be installed (Windows, PyPy: the dependency's
markers leave it out) the standard loop is used either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Literal

EventLoopChoice = Literal["uvloop", "asyncio"]


def run(main: Coroutine[Any, Any, None], choice: EventLoopChoice) -> None:
    """Run ``main`` to completion on the chosen loop, as ``asyncio.run`` would."""
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)
