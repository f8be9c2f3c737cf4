"""``TestStack``: run your handlers in-process on the real scripts, with a virtual clock.

::

    from app.testing import TestStack

    async def test_reminder_waits_a_day_then_for_the_go() -> None:
        async with TestStack() as stack:
            run_id = await stack.start("billing.remind", {"user": "u1"})
            await stack.settle(run_id)                  # parked on its 1-day sleep
            await stack.advance(days=1)                 # no day passes on the wall clock
            await stack.settle(run_id)                  # parked on the signal now
            await stack.signal(run_id, "go", {"ok": True})
            run = await stack.settle(run_id)
            assert run.status == "succeeded"
            assert "wait" in [event.type for event in await stack.events(run_id)]

What runs: a private ``redis-server`` (the embedded one ``leasehold up`` starts; or
``redis_url=`` a server of yours, under a fresh key prefix), the real Lua scripts, and
the real :class:`~app.executor.worker.Worker` in this event loop with every handler
registered by ``@handler`` in this process. Nothing is mocked but the time, and the
time only as :mod:`app.testing.clock` says (read it: ``advance`` waits until no run is
running, then moves the Redis clock every script reads).

Why not fakeredis: fakeredis with ``lupa`` runs these scripts only once their Redis 7
``#!lua flags=...`` line is cut (it answers ``error loading code: ... unexpected
symbol near '#'``), and even then has no ``BLPOP``-style wake-ups across
connections, pub/sub pushes or ``TIME`` worth trusting for leases; the project's own
rule keeps it away from Lua (STYLE.md). The embedded server is the real thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from app.executor.worker import Worker
from app.handlers import default_registry
from app.models import Run, RunEvent, RunStatus
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.store.context import StoreContext
from app.store.keys import GlobalKeys
from app.store.lua.scripts import Scripts
from app.store.redis.connection import AsyncRedis, async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.waits.store import WaitStore
from app.testing.clock import virtual_clock_scripts

POLL_S = 0.01
SETTLE_TIMEOUT_S = 30.0
# the worker's lease: short, so a run stopped by a test's end is taken back soon
LEASE_TTL_S = 2.0


class TestStack:
    """A private stack for handler tests: Redis, the real scripts, one in-process worker.

    ``async with TestStack(redis_url=None, queues=("default",), **settings)``: extra
    keyword arguments are :class:`~app.settings.Settings` fields (e.g. ``concurrency``).
    """

    __test__ = False  # a pytest collector must not take it for a test class

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        queues: tuple[str, ...] = ("default",),
        **settings: Any,
    ) -> None:
        self._redis_url = redis_url
        self._queues = queues
        self._overrides = settings
        self._server: EmbeddedRedis | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._worker_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TestStack:
        url = self._redis_url or self._start_redis()
        self.settings = Settings(
            redis_url=url,
            prefix=f"lhtest{secrets.token_hex(4)}",
            queues=list(self._queues),
            lease_ttl_s=LEASE_TTL_S,
            **self._overrides,
        )
        self.client: AsyncRedis = async_client(url)
        probe = StoreContext.for_settings(self.client, Scripts({}), self.settings)
        self._clock_key = GlobalKeys(probe.prefix).test_clock
        self.scripts = virtual_clock_scripts(self._clock_key)
        await self.scripts.load_all(self.client)
        self.runs = RunStore.for_settings(self.client, self.scripts, self.settings)
        self.waits = WaitStore.for_settings(self.client, self.scripts, self.settings)
        self.worker = Worker(self.settings, default_registry, scripts=self.scripts)
        self._worker_task = asyncio.create_task(self.worker.run(), name="test-stack-worker")
        return self

    def _start_redis(self) -> str:
        self._tmp = tempfile.TemporaryDirectory(prefix="leasehold-test-")
        self._server = EmbeddedRedis(data_dir=Path(self._tmp.name), appendonly=False, log_file=None)
        self._server.start()
        return self._server.url

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._worker_task is not None:
            self.worker.request_stop()
            self.worker.request_stop()  # the second skips the drain: the test is over
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._worker_task, SETTLE_TIMEOUT_S)
            _restore_signal_handlers()
        await self.client.aclose()
        if self._server is not None:
            self._server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    async def start(self, handler: str, input: Any = None, **options: Any) -> str:
        """Create a run of ``handler`` (its input checked by its model, as ``POST /runs``
        does); ``options`` are :class:`~app.store.runs.new.NewRun` fields. Returns its id."""
        spec = default_registry.get(handler)
        spec.parse_input(input)
        created = await self.runs.create(NewRun(handler=handler, input=input, **options))
        return created.run.id

    async def signal(self, run_id: str, name: str, payload: Any = None) -> str:
        """Send signal ``name`` (``POST /runs/{id}/signals/{name}``); returns ``delivered``
        or ``buffered``."""
        delivery, _ = await self.waits.signal(
            run_id,
            name,
            json.dumps(payload),
            max_pending=self.settings.max_pending_signals,
        )
        return delivery.value

    async def answer(self, run_id: str, answer: Any = None) -> None:
        """Answer a run's ``ctx.ask_human`` (``POST /runs/{id}/resume``)."""
        await self.runs.resume(run_id, answer)

    async def now_ms(self) -> int:
        """The stack's clock: the Redis server's, plus every ``advance`` so far."""
        seconds, micros = await self.client.time()
        offset = int(await self.client.get(self._clock_key) or 0)
        return int(seconds) * 1000 + int(micros) // 1000 + offset

    async def advance(
        self, *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0
    ) -> None:
        """Move the clock forward; what comes due (sleeps, timeouts, delayed starts,
        retries) runs at once. Waits first until no run is running (a running handler's
        time is real: see :mod:`app.testing.clock`)."""
        step_ms = round((seconds + 60 * minutes + 3600 * hours + 86_400 * days) * 1000)
        if step_ms < 0:
            raise ValueError("the clock only moves forward")
        await self._idle()
        await self.client.incrby(self._clock_key, step_ms)
        for queue in self._queues:
            await self.client.publish(self.runs.keys(queue).wake_channel, "ready")

    async def _idle(self) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while any([await self.client.zcard(self.runs.keys(q).leases) for q in self._queues]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs still running after {SETTLE_TIMEOUT_S:g} s")
            await asyncio.sleep(POLL_S)

    async def run(self, run_id: str) -> Run:
        """The run as ``GET /runs/{id}`` shows it."""
        return await self.runs.get(run_id)

    async def settle(self, run_id: str, *, timeout_s: float = SETTLE_TIMEOUT_S) -> Run:
        """Wait (real time, polling) until the run is parked or ended; returns it.

        Raises ``TimeoutError`` after ``timeout_s`` (a run waiting on the clock is
        parked: advance it).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            run = await self.runs.get(run_id)
            if run.status.is_settled or (
                run.status == RunStatus.WAITING and not await self._due(run)
            ):
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout_s:g} s")
            await asyncio.sleep(POLL_S)

    async def _due(self, run: Run) -> bool:
        """A wait whose time came (an ``advance`` passed it): the run is about to wake."""
        until_ms = (run.waiting_for or {}).get("until_ms")
        return isinstance(until_ms, int) and until_ms <= await self.now_ms()

    async def events(self, run_id: str) -> list[RunEvent]:
        """The run's events so far, oldest first (up to 10 000)."""
        return await self.runs.read_events(run_id, count=10_000)


def _restore_signal_handlers() -> None:
    """The worker took SIGINT/SIGTERM on this loop for its drain: give them back."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)
