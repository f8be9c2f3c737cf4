"""The mixed workload the harness drives through the HTTP API while faults land.

Runs are created at a steady rate, each from a seeded plan:

* ``short``    ``chaos.tick`` for a fraction of a second;
* ``long``     ``chaos.tick`` for several leases, emitting progress as it goes;
* ``cpu``      ``demo.cpu``, holding its worker's event loop for about a lease;
* ``order``    ``chaos.order``: a non-idempotent charge (async, or sync in a thread),
               checkpoints, and an idempotent notification;
* ``escalate`` ``chaos.escalate``: parks in ``waiting_human``; the harness resumes it;
* ``flaky``    ``demo.fail`` with a retryable error and two attempts;
* ``nap``      ``chaos.nap``: parks in a durable ``ctx.sleep`` for about a lease and
               must wake, on whichever worker is alive, whatever faults land meanwhile.
* ``family``   ``chaos.family``: spawns 2-3 ``chaos.tick`` children and joins them
               (parked, no lease): one child per spawn step, every end seen by the
               parent, none left running after it (:mod:`tools.chaos.family`).

Seven in ten runs name one of four tenants as ``concurrency_key``; the queue limits
each key to a few running runs (:mod:`tools.chaos.flow` checks it held).

Long, cpu and order runs ask for ``on_lease_expired`` ``retry`` or ``orphan`` at
random; some are cancelled mid-way. Some runs are followed over SSE, by the
client's resumable iterator or by a raw follower that hangs up at random and
resumes with ``Last-Event-ID`` (on either API). Every create carries an
idempotency key and is retried (on either API) until it is answered, as a
careful client does, so a create whose answer was lost is never a second run.

A "person" loop plays the operator: it resumes ``waiting_human`` runs, and
resolves ``reconciliation_required`` ones from the side channel's truth (the
effect ran: ``retry`` with ``applied``; it did not: ``fail``).

Every answer any API gives the harness is counted by status (:class:`Answers`):
the checker requires that none is a 5xx other than 503, and that every 503 says
``Retry-After``. A cancel answered 202 is noted on its run (``cancel_acked``).
The purge/delete workload is :mod:`tools.chaos.janitor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource

from app.client import ApiError, AsyncClient
from app.models import TERMINAL_EVENT_TYPES, Run, RunEvent, RunStatus
from tools.chaos.handlers import read_executions

# the tenants runs are keyed by (their limit is tools/chaos/flow.py's KEY_LIMIT)
FLOW_KEYS = [f"tenant-{i}" for i in range(4)]

T = TypeVar("T")

CALL_DEADLINE_S = 90.0
STREAM_TIMEOUT = httpx.Timeout(10.0, read=30.0)
PERSON_PERIOD_S = 1.0
# (kind, weight)
MIX = [
    ("short", 30),
    ("long", 20),
    ("cpu", 6),
    ("order", 30),
    ("escalate", 6),
    ("flaky", 8),
    ("nap", 6),
    ("quota", 8),
    ("family", 6),
]


# runs created pinned (the rest auto_upgrade, the default)
PINNED_SHARE = 0.25


@dataclass(frozen=True)
class RunPlan:
    """What to create, and what the harness does to the run afterwards."""

    kind: str
    handler: str
    input: dict[str, Any]
    on_lease_expired: str = "orphan"
    max_attempts: int = 1
    follow: str | None = None  # "client" | "raw"
    cancel_after_s: float | None = None
    # most runs count against one of a few tenants' key limits (tools/chaos/flow.py)
    concurrency_key: str | None = None
    # some runs are pinned to the build that first claims them (issue 36): a deploy fault
    # then leaves them to their build's workers, or to an upgrade once it has none
    versioning: str | None = None


@dataclass
class Follow:
    """What one SSE follower received: (id, type, fence) in order, and how."""

    run_id: str
    mode: str
    received: list[tuple[str, str, int]] = field(default_factory=list)
    connections: int = 0
    done: bool = False
    error: str | None = None
    gone: bool = False  # answered 404 on a reconnection: the run was deleted meanwhile


@dataclass
class Tracked:
    """A run the harness created (``run_id`` once an API answered)."""

    plan: RunPlan
    key: str
    run_id: str | None = None
    follow: Follow | None = None
    error: str | None = None  # the create was never answered
    cancel_acked: bool = False  # a cancel was answered 202 (the run was not terminal then)


def make_plan(rng: random.Random, ttl_s: float) -> RunPlan:
    """A seeded plan for the next run."""
    kind = rng.choices([k for k, _ in MIX], weights=[w for _, w in MIX])[0]
    handler, payload = _handler_input(kind, rng, ttl_s)
    retry = kind in ("long", "cpu", "order") and rng.random() < 0.5
    attempts = 3 if retry else (2 if kind == "flaky" else 1)
    follow = rng.choices([None, "client", "raw"], weights=[50, 25, 25])[0]
    cancel = None
    if kind in ("long", "order") and rng.random() < 0.15:
        cancel = rng.uniform(0.3, 3.0)
    key = rng.choice(FLOW_KEYS) if rng.random() < 0.7 else None
    pinned = rng.random() < PINNED_SHARE
    return RunPlan(
        versioning="pinned" if pinned else None,
        concurrency_key=key,
        kind=kind,
        handler=handler,
        input=payload,
        on_lease_expired="retry" if retry else "orphan",
        max_attempts=attempts,
        follow=follow,
        cancel_after_s=cancel,
    )


def _handler_input(kind: str, rng: random.Random, ttl_s: float) -> tuple[str, dict[str, Any]]:
    if kind == "short":
        return "chaos.tick", {"seconds": rng.uniform(0.0, 0.4), "every_s": 0.1}
    if kind == "long":
        return "chaos.tick", {"seconds": rng.uniform(1.5, 4.0) * ttl_s, "every_s": 0.3}
    if kind == "cpu":
        return "demo.cpu", {"seconds": rng.uniform(0.5, 1.0) * ttl_s}
    if kind == "order":
        return "chaos.order", {
            "charge_s": rng.uniform(0.1, 1.0) * ttl_s,
            "sync_charge": rng.random() < 0.5,
            "steps": rng.randint(2, 5),
            "step_s": rng.uniform(0.1, 0.5) * ttl_s,
        }
    if kind == "escalate":
        return "chaos.escalate", {"lease_s": 0.3}
    if kind == "nap":
        return "chaos.nap", {"seconds": rng.uniform(0.5, 2.0) * ttl_s}
    if kind == "family":
        return "chaos.family", {
            "children": rng.randint(2, 3),
            "child_s": rng.uniform(0.2, 1.5) * ttl_s,
        }
    if kind == "quota":
        return "chaos.quota", {"calls": rng.randint(1, 3)}
    return "demo.fail", {"message": "flaky upstream", "retryable": True}


@dataclass
class Answers:
    """Every HTTP answer the harness got, by status; the 5xx ones kept for the report."""

    by_status: Counter[int] = field(default_factory=Counter)
    # (method path, status, Retry-After) of each 5xx answer
    server_errors: list[tuple[str, int, str | None]] = field(default_factory=list)
    creates_refused: int = 0  # POST /runs answered 503 (memory high-water, Redis away)

    def note(self, method: str, path: str, status: int, retry_after: str | None) -> None:
        """Count one answer."""
        self.by_status[status] += 1
        if status == 503 and method == "POST" and path == "/runs":
            self.creates_refused += 1
        if status >= 500:
            self.server_errors.append((f"{method} {path}", status, retry_after))

    async def hook(self, response: httpx.Response) -> None:
        """An httpx response hook: counts the answer without reading its body."""
        request = response.request
        self.note(
            request.method,
            request.url.path,
            response.status_code,
            response.headers.get("retry-after"),
        )


class Api:
    """Both API processes, called the way a careful client calls them.

    A call that fails in transit or with a 5xx is sent again, to a random API,
    until ``CALL_DEADLINE_S``; creates are safe to repeat because they carry an
    idempotency key.
    """

    def __init__(self, urls: list[str], rng: random.Random) -> None:
        self.urls = urls
        self.rng = rng
        self.clients = {url: AsyncClient(url, timeout_s=10) for url in urls}
        self.answers = Answers()
        for client in self.clients.values():
            client.http.event_hooks["response"].append(self.answers.hook)
        self.retries = 0

    async def aclose(self) -> None:
        """Close every connection pool."""
        for client in self.clients.values():
            await client.aclose()

    async def call(self, fn: Callable[[AsyncClient], Awaitable[T]]) -> T:
        """``fn(client)`` on a random API, again on transport errors and 5xx answers."""
        deadline = time.monotonic() + CALL_DEADLINE_S
        delay = 0.1
        while True:
            client = self.clients[self.rng.choice(self.urls)]
            try:
                return await fn(client)
            except (httpx.TransportError, ApiError) as exc:
                if isinstance(exc, ApiError) and exc.status < 500:
                    raise
                if time.monotonic() > deadline:
                    raise
            self.retries += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


class Workload:
    """Creates runs, follows and cancels some, and plays the person for parked ones."""

    def __init__(
        self, api: Api, rng: random.Random, *, side_dir: Path, ttl_s: float, rate_per_s: float
    ) -> None:
        self.api = api
        self.rng = rng
        self.side_dir = side_dir
        self.ttl_s = ttl_s
        self.rate_per_s = rate_per_s
        self.runs: list[Tracked] = []
        self.follows: list[Follow] = []
        self.decisions: dict[str, int] = {}
        self.cancels = 0
        self._follow_tasks: dict[asyncio.Task[None], str] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def streams_by_api(self) -> dict[str, int]:
        """How many followers are connected to each API now (the kill_api fault's pick)."""
        counts: dict[str, int] = {}
        for task, url in self._follow_tasks.items():
            if not task.done():
                counts[url] = counts.get(url, 0) + 1
        return counts

    async def create_until(
        self, deadline: float, keep_going: Callable[[], bool] = lambda: False
    ) -> None:
        """Create runs at ``rate_per_s`` until ``deadline`` and until ``keep_going()`` is false.

        ``keep_going`` lets the faults still promised run against live work, not an idle
        cluster, when a loaded machine made them late.
        """
        while time.monotonic() < deadline or keep_going():
            self._spawn(self._drive(self._track()))
            await asyncio.sleep(self.rng.expovariate(self.rate_per_s))

    async def create_burst(self, n: int) -> None:
        """Create ``n`` runs at once, tracked like the others; returns once each create was
        answered (or failed for good): a fault's burst (``kill_idle_worker``)."""
        burst = [self._track() for _ in range(n)]
        answered = [asyncio.Event() for _ in burst]
        for tracked, event in zip(burst, answered, strict=True):
            self._spawn(self._drive(tracked, event))
        await asyncio.gather(*(event.wait() for event in answered))

    def _track(self) -> Tracked:
        """The next planned run, tracked from before its create is sent."""
        tracked = Tracked(make_plan(self.rng, self.ttl_s), key=f"chaos-{len(self.runs)}")
        self.runs.append(tracked)
        return tracked

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _drive(self, tracked: Tracked, answered: asyncio.Event | None = None) -> None:
        try:
            await self._create_and_follow(tracked, answered)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # recorded: the checker reports it, nothing is lost silently
            tracked.error = f"{type(exc).__name__}: {exc}"
        finally:
            if answered is not None:
                answered.set()

    async def _create_and_follow(
        self, tracked: Tracked, answered: asyncio.Event | None = None
    ) -> None:
        plan = tracked.plan
        run = await self.api.call(
            lambda client: client.create(
                plan.handler,
                plan.input,
                idempotency_key=tracked.key,
                on_lease_expired=plan.on_lease_expired,
                max_attempts=plan.max_attempts,
                concurrency_key=plan.concurrency_key,
                versioning=plan.versioning,
            )
        )
        tracked.run_id = run.id
        if answered is not None:
            answered.set()
        if plan.follow is not None:
            tracked.follow = Follow(run.id, plan.follow)
            self.follows.append(tracked.follow)
            url = self.rng.choice(self.api.urls)
            follower = self._follow_client if plan.follow == "client" else self._follow_raw
            task = self._spawn(follower(tracked.follow, url, random.Random(self.rng.random())))
            self._follow_tasks[task] = url
        if plan.cancel_after_s is not None:
            await asyncio.sleep(plan.cancel_after_s)
            await self._cancel(tracked)

    async def _cancel(self, tracked: Tracked) -> None:
        assert tracked.run_id is not None
        run_id = tracked.run_id
        with contextlib.suppress(ApiError):  # 409: it ended first
            await self.api.call(lambda client: client.cancel(run_id))
            tracked.cancel_acked = True
            self.cancels += 1

    async def _follow_client(self, follow: Follow, url: str, rng: random.Random) -> None:
        """The client library's resumable iterator, from the first event to the last."""
        async with AsyncClient(url) as client:
            client.http.event_hooks["response"].append(self.api.answers.hook)
            try:
                async for event in client.events(follow.run_id):
                    follow.received.append((event.id, event.type, event.fence))
                follow.done = True
            except ApiError as exc:
                follow.gone = exc.status == 404
                if not follow.gone:
                    follow.error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # any way the follow broke is what the checker reports
                follow.error = f"{type(exc).__name__}: {exc}"

    async def _follow_raw(self, follow: Follow, url: str, rng: random.Random) -> None:
        """Plain HTTP: hang up after a few events, resume with Last-Event-ID on any API."""
        try:
            await self._follow_raw_sessions(follow, url, rng)
        except Exception as exc:  # any way the follow broke is what the checker reports
            follow.error = f"{type(exc).__name__}: {exc}"

    async def _follow_raw_sessions(self, follow: Follow, url: str, rng: random.Random) -> None:
        hooks = {"response": [self.api.answers.hook]}
        async with httpx.AsyncClient(timeout=STREAM_TIMEOUT, event_hooks=hooks) as http:
            while not follow.done and not follow.gone:
                base = url if follow.connections == 0 else rng.choice(self.api.urls)
                # the API died under us: resume like after any other hang-up
                with contextlib.suppress(httpx.TransportError):
                    await self._raw_session(http, base, follow, rng.randint(1, 6))
                if follow.error is not None:
                    return
                await asyncio.sleep(rng.uniform(0.05, 0.5))

    async def _raw_session(
        self, http: httpx.AsyncClient, base: str, follow: Follow, budget: int
    ) -> None:
        last = follow.received[-1][0] if follow.received else None
        headers = {"Last-Event-ID": last} if last else {}
        url = f"{base}/runs/{follow.run_id}/events"
        async with http.stream("GET", url, headers=headers) as response:
            if response.status_code >= 500:
                return  # Redis is away: try again shortly
            if response.status_code == 404:
                follow.gone = True  # deleted meanwhile: the checker asks whether by the janitor
                return
            if response.status_code != 200:
                follow.error = f"HTTP {response.status_code} on {url}"
                return
            follow.connections += 1
            async for message in EventSource(response).aiter_sse():
                if not message.data:
                    continue  # a keep-alive comment (the parser repeats the last id on it)
                event = _triple(message.data)
                follow.received.append(event)
                if event[1] in TERMINAL_EVENT_TYPES:
                    follow.done = True
                    return
                budget -= 1
                if budget == 0:
                    return  # hang up mid-run

    async def person(self, stop: asyncio.Event) -> None:
        """Resume waiting_human runs and resolve reconciliation_required ones until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(httpx.TransportError, ApiError):
                for run in await self._parked(RunStatus.WAITING_HUMAN):
                    await self._decide(run.id, "resumed", self._resume(run.id))
                for run in await self._parked(RunStatus.RECONCILIATION_REQUIRED):
                    await self._decide(run.id, *self._resolution(run))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=PERSON_PERIOD_S)

    async def _parked(self, status: RunStatus) -> list[Run]:
        page = await self.api.call(lambda client: client.list_runs(status=status.value, limit=200))
        return page.items

    async def _resume(self, run_id: str) -> None:
        await self.api.call(lambda client: client.resume(run_id, {"answer": "carry on"}))

    def _resolution(self, run: Run) -> tuple[str, Awaitable[None]]:
        """Resolve from the side channel: retry as applied if the effect ran, else fail."""
        details = run.error.details if run.error else {}
        unknown = {record.get("key") for record in details.get("effects", [])}
        ran = {row["key"] for row in read_executions(self.side_dir, run.id)}
        if unknown and unknown <= ran:
            return "resolved_applied", self._resolve(
                run.id, "retry", effect_outcome="applied", effect_result={"resolved": True}
            )
        return "resolved_failed", self._resolve(run.id, "fail", note="the charge never ran")

    async def _resolve(self, run_id: str, action: str, **decision: Any) -> None:
        await self.api.call(lambda client: client.resolve(run_id, action, **decision))

    async def _decide(self, run_id: str, name: str, action: Awaitable[None]) -> None:
        try:
            await action
        except ApiError as exc:
            if exc.status != 409:  # 409: someone (or something) changed it first
                raise
            return
        self.decisions[name] = self.decisions.get(name, 0) + 1

    async def finish_followers(self, timeout_s: float) -> None:
        """Let followers of ended runs finish, then stop the rest (followers of parked runs)."""
        pending = [task for task in self._follow_tasks if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        await self.cancel_all()

    async def cancel_all(self) -> None:
        """Stop every task the workload started."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _triple(data: str) -> tuple[str, str, int]:
    """(id, type, fence) of one SSE message's RunEvent JSON: what the checker compares."""
    event = RunEvent.model_validate_json(data)
    return event.id, event.type, event.fence
