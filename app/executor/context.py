"""``RunContext``: everything a handler sees of the run it executes.

Handlers get identity (run id, attempt, fence), their input, a cancellation
signal, and ways to report what they do (``emit``, ``progress``). They see
nothing of the worker's machinery: leases, heartbeats and Redis stay behind
this object.

The fence is handed out on purpose: pass ``ctx.fence`` to downstream systems
that can reject writes from a stale executor (Kleppmann's fencing token).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.executor.events import EventSink


class RunContext:
    """The handler's view of its run."""

    def __init__(
        self,
        *,
        run_id: str,
        queue: str,
        handler: str,
        attempt: int,
        max_attempts: int,
        fence: int,
        owner_id: str,
        input: Any,
        state: Any,
        resume_input: Any,
        sink: EventSink,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.run_id = run_id
        self.queue = queue
        self.handler = handler
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.fence = fence
        self.owner_id = owner_id
        self.input = input
        self.state = state
        self.resume_input = resume_input
        self._sink = sink
        self._loop = loop
        self._cancelled = threading.Event()
        self._cancel_reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once the run must stop: a client cancelled it, or its lease is gone.

        Sync handlers (which cannot be interrupted) should check this between steps.
        """
        return self._cancelled.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why the run is stopping: ``cancel_requested``, ``lease_lost``, ``drain``..."""
        return self._cancel_reason

    def _signal_cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self._cancel_reason = reason
            self._cancelled.set()

    async def emit(self, event_type: str, data: Any = None) -> None:
        """Append an event to the run's stream (batched; order is kept).

        Raises :class:`~app.errors.InvalidEvent` for reserved types such as
        ``succeeded`` and :class:`~app.errors.EventTooLarge` over the size bound.
        """
        await self._sink.add(event_type, data)

    async def progress(self, **data: Any) -> None:
        """Emit a ``progress`` event: evidence that the run is alive and moving."""
        await self._sink.add("progress", data)

    def emit_sync(self, event_type: str, data: Any = None) -> None:
        """``emit`` for sync handlers running in the worker's thread pool."""
        future = asyncio.run_coroutine_threadsafe(self._sink.add(event_type, data), self._loop)
        future.result()
