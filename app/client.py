"""HTTP clients for Leasehold's API (httpx), sync and async, used by the CLI and users.

Errors come back as :class:`ApiError` carrying the problem+json body. Each API
method is one request spec (a :class:`_Call`: method, path, body or query, and
the decoder of its answer) built by one function; :class:`Client` and
:class:`AsyncClient` only send specs, so the two cannot drift apart.
``events(run_id)`` follows a run over SSE and resumes by itself with
``Last-Event-ID`` after a dropped connection or a 502/503/504 answer, so the
caller sees every event exactly once, ending with the terminal one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

# first: httpx without its command-line client (rich, pygments, click), before httpx_sse
from app.httpx_import import httpx, verifies

# isort: split
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse
from pydantic import BaseModel

# ApiError lives with the other errors (a light `runs get` raises it without this module)
from app.errors import ApiError
from app.models import TERMINAL_EVENT_TYPES, Run, RunEvent, WorkerInfo
from app.models.api import (
    CreateRunsResult,
    FireResult,
    HandlerInfo,
    QueuePage,
    RateLimitPage,
    SchedulePage,
    SignalResult,
    StatusChange,
    WorkerDrain,
)
from app.models.read import (
    PurgeResult,
    QueueInfo,
    QueueLimits,
    QueueSeries,
    RateLimitInfo,
    RateLimitSpec,
    RetryOperation,
    RunPage,
    Schedule,
)
from app.retry import API_BACKOFF

DEFAULT_TIMEOUT_S = 30.0
# a stream is silent between events; keep-alive comments arrive every 15 s by default
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
# answers that mean "not now" rather than "no": a follower waits and resumes
TRANSIENT_STATUS = frozenset({502, 503, 504})

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

log = logging.getLogger(__name__)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        try:
            body = response.json()
        except ValueError:
            body = {"title": response.text or response.reason_phrase}
        raise ApiError(response.status_code, body if isinstance(body, dict) else {})
    return response


def _events_request(
    run_id: str, cursor: str | None, tree: bool = False
) -> tuple[str, dict[str, str]]:
    path = f"/runs/{run_id}/events" + ("?include=children" if tree else "")
    return path, ({"Last-Event-ID": cursor} if cursor else {})


def _event(message: ServerSentEvent) -> RunEvent:
    return RunEvent.model_validate_json(message.data)


# the tree stream's last message: every run of the tree ended (app/api/tree.py)
TREE_ENDED = "tree_ended"


def _resumable(exc: httpx.TransportError | ApiError, reconnect: bool) -> bool:
    """Whether a follow that broke this way resumes (with Last-Event-ID, after a backoff).

    A dropped connection does, and so does an API that answers "not now" (502, 503,
    504: Redis briefly unreachable, a proxy in front of a restarting API): the run
    goes on meanwhile, and giving up would lose its outcome. Any other error status
    (404 unknown run, 400 bad id) is an answer, and is raised.
    """
    if not reconnect:
        return False
    return not isinstance(exc, ApiError) or exc.status in TRANSIENT_STATUS


class _Cursor:
    """Where a resumable follow is: the last stream id seen, whether it ended, its reconnects.

    Reconnect delays follow :data:`~app.retry.API_BACKOFF` with full jitter, so the
    followers an API restart cut off come back spread out, not in one wave; an
    event received starts the next outage's backoff from the beginning.
    """

    def __init__(self, run_id: str, last_event_id: str | None, tree: bool = False) -> None:
        self.run_id = run_id
        self.last_event_id = last_event_id
        self.tree = tree
        self.ended = False
        self._reconnects = API_BACKOFF.streak()

    def advance(self, message: ServerSentEvent) -> RunEvent:
        """The message's event; past it. A tree stream resumes from the SSE id (a tree key)."""
        event = _event(message)
        if self.tree:
            self.last_event_id = message.id or self.last_event_id
            self.ended = event.type == TREE_ENDED
        else:
            self.last_event_id = event.id or self.last_event_id
            self.ended = event.type in TERMINAL_EVENT_TYPES
        self._reconnects.reset()
        return event

    def reconnect_delay_s(self, exc: httpx.TransportError | ApiError | None) -> float:
        """How long to wait before resuming (logged); ``exc`` None: the stream just ended."""
        what = f"following {self.run_id} (from {self.last_event_id or 'the start'})"
        if exc is None:
            return self._reconnects.next_delay_s()
        return self._reconnects.failed(exc, what=what, logger=log, level=logging.INFO)


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One API call, as both clients send it: the request, and how to read a 2xx answer."""

    method: str
    path: str
    decode: Callable[[Any], T]
    json: Any = None  # None: no body
    params: dict[str, Any] | None = None


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that are set, JSON-ready: a datetime (``run_at``) as RFC 3339."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in fields.items()
        if value is not None
    }


def _models(model: type[M]) -> Callable[[Any], list[M]]:
    return lambda items: [model.model_validate(item) for item in items]


def _nothing(body: Any) -> None:
    return None


def _body(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer (``None`` when it has none, e.g. a 204); raises ApiError."""
    _check(response)
    return response.json() if response.content else None


# One request spec per method; Client and AsyncClient only send them.


def _create(handler: str, input: Any, options: dict[str, Any]) -> _Call[Run]:
    body = {"handler": handler, "input": input if input is not None else {}, **_present(options)}
    return _Call("POST", "/runs", Run.model_validate, json=body)


def _create_many(items: list[dict[str, Any]]) -> _Call[CreateRunsResult]:
    body = {"items": [_present(item) for item in items]}
    return _Call("POST", "/runs/batch", CreateRunsResult.model_validate, json=body)


def _get(run_id: str) -> _Call[Run]:
    return _Call("GET", f"/runs/{run_id}", Run.model_validate)


def _list_runs(filters: dict[str, Any]) -> _Call[RunPage]:
    params = _present({key: value for key, value in filters.items() if key != "metadata"})
    for key, value in (filters.get("metadata") or {}).items():
        params[f"metadata.{key}"] = value  # GET /runs?metadata.<key>=<value>
    return _Call("GET", "/runs", RunPage.model_validate, params=params)


def _children(run_id: str, limit: int, cursor: str | None) -> _Call[RunPage]:
    params = _present({"limit": limit, "cursor": cursor})
    return _Call("GET", f"/runs/{run_id}/children", RunPage.model_validate, params=params)


def _cancel(run_id: str) -> _Call[StatusChange]:
    return _Call("POST", f"/runs/{run_id}/cancel", StatusChange.model_validate)


def _delete(run_id: str) -> _Call[None]:
    return _Call("DELETE", f"/runs/{run_id}", _nothing)


def _purge(filters: dict[str, Any]) -> _Call[PurgeResult]:
    body = _present(filters)
    if isinstance(body.get("finished_before"), datetime):
        body["finished_before"] = body["finished_before"].isoformat()
    return _Call("POST", "/runs/purge", PurgeResult.model_validate, json=body)


def _resume(run_id: str, resume_input: Any) -> _Call[StatusChange]:
    path = f"/runs/{run_id}/resume"
    return _Call("POST", path, StatusChange.model_validate, json={"input": resume_input})


def _signal(
    run_id: str, name: str, payload: Any, idempotency_key: str | None
) -> _Call[SignalResult]:
    path = f"/runs/{run_id}/signals/{name}"
    body = _present({"payload": payload, "idempotency_key": idempotency_key})
    body.setdefault("payload", None)
    return _Call("POST", path, SignalResult.model_validate, json=body)


def _resolve(run_id: str, action: str, decision: dict[str, Any]) -> _Call[Run]:
    body = {"action": action, **_present(decision)}
    return _Call("POST", f"/runs/{run_id}/resolve", Run.model_validate, json=body)


def _retry(run_id: str, options: dict[str, Any]) -> _Call[Run]:
    body = _present(options) or None
    return _Call("POST", f"/runs/{run_id}/retry", Run.model_validate, json=body)


def _retry_many(filters: dict[str, Any]) -> _Call[RetryOperation]:
    body = {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in _present(filters).items()
    }
    return _Call("POST", "/runs/retry", RetryOperation.model_validate, json=body)


def _operation(operation_id: str, action: str | None = None) -> _Call[RetryOperation]:
    if action is None:
        return _Call("GET", f"/operations/{operation_id}", RetryOperation.model_validate)
    return _Call("POST", f"/operations/{operation_id}/{action}", RetryOperation.model_validate)


def _handlers() -> _Call[list[HandlerInfo]]:
    return _Call("GET", "/handlers", _models(HandlerInfo))


def _workers() -> _Call[list[WorkerInfo]]:
    return _Call("GET", "/workers", _models(WorkerInfo))


def _queues() -> _Call[QueuePage]:
    return _Call("GET", "/queues", QueuePage.model_validate)


def _declare_queue(name: str) -> _Call[QueueInfo]:
    return _Call("PUT", f"/queues/{name}", QueueInfo.model_validate)


def _undeclare_queue(name: str) -> _Call[None]:
    return _Call("DELETE", f"/queues/{name}", _nothing)


def _rate_limit_path(key: str) -> str:
    # a template's braces travel percent-encoded; ':' may stay as it is
    return f"/rate-limits/{quote(key, safe=':')}"


def _rate_limits() -> _Call[RateLimitPage]:
    return _Call("GET", "/rate-limits", RateLimitPage.model_validate)


def _rate_limit(key: str) -> _Call[RateLimitInfo]:
    return _Call("GET", _rate_limit_path(key), RateLimitInfo.model_validate)


def _declare_rate_limit(key: str, spec: RateLimitSpec) -> _Call[RateLimitInfo]:
    body = spec.model_dump()
    return _Call("PUT", _rate_limit_path(key), RateLimitInfo.model_validate, json=body)


def _undeclare_rate_limit(key: str) -> _Call[None]:
    return _Call("DELETE", _rate_limit_path(key), _nothing)


def _limits(name: str) -> _Call[QueueLimits]:
    return _Call("GET", f"/queues/{name}/limits", QueueLimits.model_validate)


def _set_limits(name: str, limits: QueueLimits) -> _Call[QueueLimits]:
    body = limits.model_dump()
    return _Call("PUT", f"/queues/{name}/limits", QueueLimits.model_validate, json=body)


def _set_priority(run_id: str, priority: int) -> _Call[Run]:
    return _Call("PATCH", f"/runs/{run_id}", Run.model_validate, json={"priority": priority})


def _queue_series(name: str, minutes: int) -> _Call[QueueSeries]:
    params = {"minutes": minutes}
    return _Call("GET", f"/queues/{name}/series", QueueSeries.model_validate, params=params)


def _drain_worker(worker_id: str) -> _Call[WorkerDrain]:
    return _Call("POST", f"/workers/{worker_id}/drain", WorkerDrain.model_validate)


def _create_schedule(
    schedule_id: str, run: dict[str, Any], spec: dict[str, Any]
) -> _Call[Schedule]:
    body = {"id": schedule_id, "run": run, **_present(spec)}
    return _Call("POST", "/schedules", Schedule.model_validate, json=body)


def _get_schedule(schedule_id: str) -> _Call[Schedule]:
    return _Call("GET", f"/schedules/{schedule_id}", Schedule.model_validate)


def _list_schedules(limit: int, cursor: str | None) -> _Call[SchedulePage]:
    params = _present({"limit": limit, "cursor": cursor})
    return _Call("GET", "/schedules", SchedulePage.model_validate, params=params)


def _update_schedule(schedule_id: str, changes: dict[str, Any]) -> _Call[Schedule]:
    path = f"/schedules/{schedule_id}"
    return _Call("PATCH", path, Schedule.model_validate, json=_present(changes))


def _schedule_action(schedule_id: str, action: str) -> _Call[Schedule]:
    return _Call("POST", f"/schedules/{schedule_id}/{action}", Schedule.model_validate)


def _delete_schedule(schedule_id: str) -> _Call[None]:
    return _Call("DELETE", f"/schedules/{schedule_id}", _nothing)


def _fire_schedule(schedule_id: str, action: str, body: dict[str, Any]) -> _Call[FireResult]:
    path = f"/schedules/{schedule_id}/{action}"
    return _Call("POST", path, FireResult.model_validate, json=_present(body))


class Client:
    """Blocking client."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout_s,
            transport=transport,
            verify=verifies(base_url),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def _send(self, call: _Call[T]) -> T:
        response = self.http.request(call.method, call.path, json=call.json, params=call.params)
        return call.decode(_body(response))

    def create(self, handler: str, input: Any = None, **options: Any) -> Run:
        """POST /runs; options are the other CreateRunRequest fields."""
        return self._send(_create(handler, input, options))

    def create_many(self, items: list[dict[str, Any]]) -> CreateRunsResult:
        """POST /runs/batch: each item a CreateRunRequest body (``handler``, ``input``, ...).

        One outcome per item, in order: ``status`` 201/200 with ``run``, or 4xx/503
        with ``problem`` (that item alone was refused). Raises :class:`ApiError`
        only when the whole batch is (413 past LEASEHOLD_BATCH_MAX_ITEMS, 503 when
        Redis memory is past the high-water mark).
        """
        return self._send(_create_many(items))

    def get(self, run_id: str) -> Run:
        """GET /runs/{id}."""
        return self._send(_get(run_id))

    def list_runs(self, **filters: Any) -> RunPage:
        """GET /runs with queue/status/handler/parent_id/root_id/limit/cursor filters and
        ``metadata={k: v}`` (each pair must hold); summaries unless
        ``include="input,output,metadata"`` (any of them) asks for the large fields."""
        return self._send(_list_runs(filters))

    def children(self, run_id: str, limit: int = 50, cursor: str | None = None) -> RunPage:
        """GET /runs/{id}/children: the runs it spawned, oldest first, as summaries."""
        return self._send(_children(run_id, limit, cursor))

    def cancel(self, run_id: str) -> StatusChange:
        """POST /runs/{id}/cancel."""
        return self._send(_cancel(run_id))

    def delete(self, run_id: str) -> None:
        """DELETE /runs/{id}: delete a finished run now (ApiError 409 if it is not)."""
        self._send(_delete(run_id))

    def purge(self, **filters: Any) -> PurgeResult:
        """POST /runs/purge, one batch: queue/status/handler/finished_before/limit/cursor.

        Call again with ``cursor=result.next_cursor`` until ``result.done``.
        """
        return self._send(_purge(filters))

    def resume(self, run_id: str, resume_input: Any = None) -> StatusChange:
        """POST /runs/{id}/resume: queue a waiting_human run again with a person's input."""
        return self._send(_resume(run_id, resume_input))

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> SignalResult:
        """POST /runs/{id}/signals/{name}: wake its wait_for_signal(name), or buffer it.

        With ``idempotency_key`` a resend (after a lost answer) is answered, not sent twice.
        """
        return self._send(_signal(run_id, name, payload, idempotency_key))

    def resolve(self, run_id: str, action: str, **decision: Any) -> Run:
        """POST /runs/{id}/resolve: retry | fail | succeed a reconciliation_required run.

        ``decision`` holds the other ResolveRequest fields: output, effect_outcome,
        effect_result, note.
        """
        return self._send(_resolve(run_id, action, decision))

    def retry(self, run_id: str, **options: Any) -> Run:
        """POST /runs/{id}/retry: re-run an ended run as a new linked run; returns it.

        ``options``: checkpoint ("keep" | "drop"), max_attempts, idempotency_key.
        """
        return self._send(_retry(run_id, options))

    def retry_many(self, **filters: Any) -> RetryOperation:
        """POST /runs/retry: re-run every ended run the filters match, as an operation.

        ``filters``: queue, handler, status (a list), error_code, finished_after,
        finished_before (datetimes or RFC 3339), limit, checkpoint. Follow it with
        :meth:`operation` until its status is done.
        """
        return self._send(_retry_many(filters))

    def operation(self, operation_id: str) -> RetryOperation:
        """GET /operations/{id}: a bulk retry's progress."""
        return self._send(_operation(operation_id))

    def resume_operation(self, operation_id: str) -> RetryOperation:
        """POST /operations/{id}/resume: go on with a stalled bulk retry."""
        return self._send(_operation(operation_id, "resume"))

    def cancel_operation(self, operation_id: str) -> RetryOperation:
        """POST /operations/{id}/cancel: stop a bulk retry after its current step."""
        return self._send(_operation(operation_id, "cancel"))

    def events(
        self,
        run_id: str,
        *,
        last_event_id: str | None = None,
        reconnect: bool = True,
        include_children: bool = False,
    ) -> Iterator[RunEvent]:
        """Follow a run: history after ``last_event_id``, then live, until its terminal event.

        A dropped connection, or an API answering 502/503/504 (e.g. Redis briefly
        unreachable), is resumed with Last-Event-ID (with backoff) unless ``reconnect``
        is False. Other API errors (404, 400) raise :class:`ApiError`.
        ``include_children``: the whole tree (``?include=children``), each event's
        ``run_id`` naming its run, until the ``tree_ended`` event; every event of
        every run exactly once across reconnects.
        """
        cursor = _Cursor(run_id, last_event_id, include_children)
        while not cursor.ended:
            try:
                for message in self._follow_once(cursor):
                    yield cursor.advance(message)
                    if cursor.ended:
                        return
            except (httpx.TransportError, ApiError) as exc:
                if not _resumable(exc, reconnect):
                    raise
                time.sleep(cursor.reconnect_delay_s(exc))
                continue
            if not reconnect:
                return
            time.sleep(cursor.reconnect_delay_s(None))

    def _follow_once(self, cursor: _Cursor) -> Iterator[ServerSentEvent]:
        path, headers = _events_request(cursor.run_id, cursor.last_event_id, cursor.tree)
        with connect_sse(self.http, "GET", path, headers=headers, timeout=STREAM_TIMEOUT) as source:
            if source.response.is_error:
                source.response.read()
                _check(source.response)
            for message in source.iter_sse():
                if message.data:  # a keep-alive comment is not an event
                    yield message

    def handlers(self) -> list[HandlerInfo]:
        """GET /handlers."""
        return self._send(_handlers())

    def workers(self) -> list[WorkerInfo]:
        """GET /workers."""
        return self._send(_workers())

    def queues(self) -> QueuePage:
        """GET /queues: every declared queue and what it holds."""
        return self._send(_queues())

    def declare_queue(self, name: str) -> QueueInfo:
        """PUT /queues/{name}: declare a queue (idempotent); ApiError 409 past MAX_QUEUES."""
        return self._send(_declare_queue(name))

    def undeclare_queue(self, name: str) -> None:
        """DELETE /queues/{name}: undeclare an empty queue; ApiError 409 if it holds runs."""
        self._send(_undeclare_queue(name))

    def rate_limits(self) -> RateLimitPage:
        """GET /rate-limits: every declared key and template, each key's bucket now."""
        return self._send(_rate_limits())

    def rate_limit(self, key: str) -> RateLimitInfo:
        """GET /rate-limits/{key}: a key, a template, or a template's instance."""
        return self._send(_rate_limit(key))

    def declare_rate_limit(self, key: str, spec: RateLimitSpec) -> RateLimitInfo:
        """PUT /rate-limits/{key}: declare or change a key; ApiError 409 past the bound."""
        return self._send(_declare_rate_limit(key, spec))

    def undeclare_rate_limit(self, key: str) -> None:
        """DELETE /rate-limits/{key}: forget a declaration; ApiError 404 if none."""
        self._send(_undeclare_rate_limit(key))

    def limits(self, name: str) -> QueueLimits:
        """GET /queues/{name}/limits: the queue's concurrency limits."""
        return self._send(_limits(name))

    def set_limits(self, name: str, limits: QueueLimits) -> QueueLimits:
        """PUT /queues/{name}/limits: replace the queue's concurrency limits whole."""
        return self._send(_set_limits(name, limits))

    def set_priority(self, run_id: str, priority: int) -> Run:
        """PATCH /runs/{id}: change a queued run's priority; ApiError 409 once it started."""
        return self._send(_set_priority(run_id, priority))

    def queue_series(self, name: str, minutes: int = 60) -> QueueSeries:
        """GET /queues/{name}/series: the queue's outcomes per minute, oldest first."""
        return self._send(_queue_series(name, minutes))

    def drain_worker(self, worker_id: str) -> WorkerDrain:
        """POST /workers/{id}/drain: the worker drains as on SIGTERM (ApiError 404 if gone)."""
        return self._send(_drain_worker(worker_id))

    def create_schedule(self, schedule_id: str, run: dict[str, Any], **spec: Any) -> Schedule:
        """POST /schedules: ``run`` is a POST /runs body; spec: cron/timezone or interval_s,
        overlap, missed, catchup_window_s, paused."""
        return self._send(_create_schedule(schedule_id, run, spec))

    def get_schedule(self, schedule_id: str) -> Schedule:
        """GET /schedules/{id}, with its next fire times."""
        return self._send(_get_schedule(schedule_id))

    def list_schedules(self, limit: int = 50, cursor: str | None = None) -> SchedulePage:
        """GET /schedules: one page by id."""
        return self._send(_list_schedules(limit, cursor))

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """PATCH /schedules/{id}: the fields given replace the schedule's."""
        return self._send(_update_schedule(schedule_id, changes))

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """POST /schedules/{id}/pause: nothing fires, nothing is missed."""
        return self._send(_schedule_action(schedule_id, "pause"))

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """POST /schedules/{id}/resume: fires again from now on."""
        return self._send(_schedule_action(schedule_id, "resume"))

    def delete_schedule(self, schedule_id: str) -> None:
        """DELETE /schedules/{id}: its runs stay."""
        return self._send(_delete_schedule(schedule_id))

    def trigger_schedule(self, schedule_id: str, overlap: str | None = None) -> FireResult:
        """POST /schedules/{id}/trigger: fire once now, under the overlap policy."""
        return self._send(_fire_schedule(schedule_id, "trigger", {"overlap": overlap}))

    def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, overlap: str | None = None
    ) -> FireResult:
        """POST /schedules/{id}/backfill: every fire time in [start, end], now."""
        body = {"start": start, "end": end, "overlap": overlap}
        return self._send(_fire_schedule(schedule_id, "backfill", body))


class AsyncClient:
    """Asyncio client with the same methods as :class:`Client`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout_s,
            transport=transport,
            verify=verifies(base_url),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        response = await self.http.request(
            call.method, call.path, json=call.json, params=call.params
        )
        return call.decode(_body(response))

    async def create(self, handler: str, input: Any = None, **options: Any) -> Run:
        """POST /runs; options are the other CreateRunRequest fields."""
        return await self._send(_create(handler, input, options))

    async def create_many(self, items: list[dict[str, Any]]) -> CreateRunsResult:
        """POST /runs/batch; see :meth:`Client.create_many`."""
        return await self._send(_create_many(items))

    async def get(self, run_id: str) -> Run:
        """GET /runs/{id}."""
        return await self._send(_get(run_id))

    async def list_runs(self, **filters: Any) -> RunPage:
        """GET /runs with queue/status/handler/parent_id/root_id/limit/cursor filters and
        ``metadata={k: v}`` (each pair must hold); summaries unless
        ``include="input,output,metadata"`` (any of them) asks for the large fields."""
        return await self._send(_list_runs(filters))

    async def children(self, run_id: str, limit: int = 50, cursor: str | None = None) -> RunPage:
        """GET /runs/{id}/children; see :meth:`Client.children`."""
        return await self._send(_children(run_id, limit, cursor))

    async def queues(self) -> QueuePage:
        """GET /queues: every declared queue and what it holds."""
        return await self._send(_queues())

    async def declare_queue(self, name: str) -> QueueInfo:
        """PUT /queues/{name}: declare a queue (idempotent); ApiError 409 past MAX_QUEUES."""
        return await self._send(_declare_queue(name))

    async def undeclare_queue(self, name: str) -> None:
        """DELETE /queues/{name}; see :meth:`Client.undeclare_queue`."""
        await self._send(_undeclare_queue(name))

    async def rate_limits(self) -> RateLimitPage:
        """GET /rate-limits; see :meth:`Client.rate_limits`."""
        return await self._send(_rate_limits())

    async def rate_limit(self, key: str) -> RateLimitInfo:
        """GET /rate-limits/{key}; see :meth:`Client.rate_limit`."""
        return await self._send(_rate_limit(key))

    async def declare_rate_limit(self, key: str, spec: RateLimitSpec) -> RateLimitInfo:
        """PUT /rate-limits/{key}; see :meth:`Client.declare_rate_limit`."""
        return await self._send(_declare_rate_limit(key, spec))

    async def undeclare_rate_limit(self, key: str) -> None:
        """DELETE /rate-limits/{key}; see :meth:`Client.undeclare_rate_limit`."""
        await self._send(_undeclare_rate_limit(key))

    async def limits(self, name: str) -> QueueLimits:
        """GET /queues/{name}/limits; see :meth:`Client.limits`."""
        return await self._send(_limits(name))

    async def set_limits(self, name: str, limits: QueueLimits) -> QueueLimits:
        """PUT /queues/{name}/limits; see :meth:`Client.set_limits`."""
        return await self._send(_set_limits(name, limits))

    async def set_priority(self, run_id: str, priority: int) -> Run:
        """PATCH /runs/{id}; see :meth:`Client.set_priority`."""
        return await self._send(_set_priority(run_id, priority))

    async def queue_series(self, name: str, minutes: int = 60) -> QueueSeries:
        """GET /queues/{name}/series; see :meth:`Client.queue_series`."""
        return await self._send(_queue_series(name, minutes))

    async def drain_worker(self, worker_id: str) -> WorkerDrain:
        """POST /workers/{id}/drain; see :meth:`Client.drain_worker`."""
        return await self._send(_drain_worker(worker_id))

    async def create_schedule(self, schedule_id: str, run: dict[str, Any], **spec: Any) -> Schedule:
        """See :meth:`Client.create_schedule`."""
        return await self._send(_create_schedule(schedule_id, run, spec))

    async def get_schedule(self, schedule_id: str) -> Schedule:
        """See :meth:`Client.get_schedule`."""
        return await self._send(_get_schedule(schedule_id))

    async def list_schedules(self, limit: int = 50, cursor: str | None = None) -> SchedulePage:
        """See :meth:`Client.list_schedules`."""
        return await self._send(_list_schedules(limit, cursor))

    async def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """See :meth:`Client.update_schedule`."""
        return await self._send(_update_schedule(schedule_id, changes))

    async def pause_schedule(self, schedule_id: str) -> Schedule:
        """See :meth:`Client.pause_schedule`."""
        return await self._send(_schedule_action(schedule_id, "pause"))

    async def resume_schedule(self, schedule_id: str) -> Schedule:
        """See :meth:`Client.resume_schedule`."""
        return await self._send(_schedule_action(schedule_id, "resume"))

    async def delete_schedule(self, schedule_id: str) -> None:
        """See :meth:`Client.delete_schedule`."""
        return await self._send(_delete_schedule(schedule_id))

    async def trigger_schedule(self, schedule_id: str, overlap: str | None = None) -> FireResult:
        """See :meth:`Client.trigger_schedule`."""
        return await self._send(_fire_schedule(schedule_id, "trigger", {"overlap": overlap}))

    async def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, overlap: str | None = None
    ) -> FireResult:
        """See :meth:`Client.backfill_schedule`."""
        body = {"start": start, "end": end, "overlap": overlap}
        return await self._send(_fire_schedule(schedule_id, "backfill", body))

    async def cancel(self, run_id: str) -> StatusChange:
        """POST /runs/{id}/cancel."""
        return await self._send(_cancel(run_id))

    async def delete(self, run_id: str) -> None:
        """DELETE /runs/{id}: delete a finished run now (ApiError 409 if it is not)."""
        await self._send(_delete(run_id))

    async def purge(self, **filters: Any) -> PurgeResult:
        """POST /runs/purge, one batch; see :meth:`Client.purge`."""
        return await self._send(_purge(filters))

    async def resume(self, run_id: str, resume_input: Any = None) -> StatusChange:
        """POST /runs/{id}/resume."""
        return await self._send(_resume(run_id, resume_input))

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> SignalResult:
        """POST /runs/{id}/signals/{name}; see :meth:`Client.signal`."""
        return await self._send(_signal(run_id, name, payload, idempotency_key))

    async def resolve(self, run_id: str, action: str, **decision: Any) -> Run:
        """POST /runs/{id}/resolve; see :meth:`Client.resolve`."""
        return await self._send(_resolve(run_id, action, decision))

    async def retry(self, run_id: str, **options: Any) -> Run:
        """POST /runs/{id}/retry (see :meth:`Client.retry`)."""
        return await self._send(_retry(run_id, options))

    async def retry_many(self, **filters: Any) -> RetryOperation:
        """POST /runs/retry (see :meth:`Client.retry_many`)."""
        return await self._send(_retry_many(filters))

    async def operation(self, operation_id: str) -> RetryOperation:
        """GET /operations/{id}."""
        return await self._send(_operation(operation_id))

    async def resume_operation(self, operation_id: str) -> RetryOperation:
        """POST /operations/{id}/resume."""
        return await self._send(_operation(operation_id, "resume"))

    async def cancel_operation(self, operation_id: str) -> RetryOperation:
        """POST /operations/{id}/cancel."""
        return await self._send(_operation(operation_id, "cancel"))

    async def handlers(self) -> list[HandlerInfo]:
        """GET /handlers."""
        return await self._send(_handlers())

    async def workers(self) -> list[WorkerInfo]:
        """GET /workers."""
        return await self._send(_workers())

    async def events(
        self,
        run_id: str,
        *,
        last_event_id: str | None = None,
        reconnect: bool = True,
        include_children: bool = False,
    ) -> AsyncIterator[RunEvent]:
        """Async twin of :meth:`Client.events`."""
        import asyncio  # here: the sync client (`runs get`) starts without it (app/retry.py)

        cursor = _Cursor(run_id, last_event_id, include_children)
        while not cursor.ended:
            try:
                async for message in self._follow_once(cursor):
                    yield cursor.advance(message)
                    if cursor.ended:
                        return
            except (httpx.TransportError, ApiError) as exc:
                if not _resumable(exc, reconnect):
                    raise
                await asyncio.sleep(cursor.reconnect_delay_s(exc))
                continue
            if not reconnect:
                return
            await asyncio.sleep(cursor.reconnect_delay_s(None))

    async def _follow_once(self, cursor: _Cursor) -> AsyncIterator[ServerSentEvent]:
        path, headers = _events_request(cursor.run_id, cursor.last_event_id, cursor.tree)
        async with aconnect_sse(
            self.http, "GET", path, headers=headers, timeout=STREAM_TIMEOUT
        ) as source:
            if source.response.is_error:
                await source.response.aread()
                _check(source.response)
            async for message in source.aiter_sse():
                if message.data:  # a keep-alive comment is not an event
                    yield message
