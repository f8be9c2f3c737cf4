"""The asyncio client (httpx): the same methods as :class:`~app.client.sync.Client`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

# first: httpx without its command-line client (rich, pygments, click), before httpx_sse
from app.httpx_import import httpx, verifies

# isort: split
from httpx_sse import ServerSentEvent, aconnect_sse

from app.client.calls import (
    DEFAULT_TIMEOUT_S,
    T,
    _audit,
    _body,
    _build,
    _builds,
    _Call,
    _cancel,
    _check,
    _children,
    _create,
    _create_key,
    _create_many,
    _create_schedule,
    _declare_queue,
    _declare_rate_limit,
    _delete,
    _delete_namespace,
    _delete_schedule,
    _drain_worker,
    _fire_schedule,
    _get,
    _get_schedule,
    _handlers,
    _headers,
    _history,
    _keys,
    _lease,
    _limits,
    _list_runs,
    _list_schedules,
    _namespace,
    _namespaces,
    _operation,
    _purge,
    _put_namespace,
    _queue_series,
    _queues,
    _rate_limit,
    _rate_limits,
    _resolve,
    _resume,
    _retry,
    _retry_many,
    _revoke_key,
    _rotate_key,
    _schedule_action,
    _set_limits,
    _set_priority,
    _signal,
    _stream_token,
    _undeclare_queue,
    _undeclare_rate_limit,
    _update_schedule,
    _upgrade,
    _upgrade_build,
    _workers,
)
from app.client.follow import STREAM_TIMEOUT, _Cursor, _events_request, _resumable
from app.errors import ApiError
from app.models import Run, RunEvent, WorkerInfo
from app.models.api import (
    CreateRunsResult,
    FireResult,
    HandlerInfo,
    LeaseView,
    QueuePage,
    RateLimitPage,
    SchedulePage,
    SignalResult,
    StatusChange,
    StreamToken,
    WorkerDrain,
)
from app.models.builds import BuildInfo, UpgradeSummary
from app.models.history import RunHistory
from app.models.keys import AuditPage, KeyPage, KeySecret
from app.models.namespaces import Namespace, NamespacePage
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


class AsyncClient:
    """Asyncio client with the same methods as :class:`Client`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        namespace: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key, namespace),
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

    async def history(self, run_id: str, max_events: int | None = None) -> RunHistory:
        """GET /runs/{id}/history: what ``app.testing.replay`` needs to replay the run; its
        events cut at ``max_events`` (the API's cap when None; ``events_truncated`` says so)."""
        return await self._send(_history(run_id, max_events))

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

    async def create_key(
        self,
        name: str,
        role: str,
        expires_in_s: int | None = None,
        namespace: str | None = None,
    ) -> KeySecret:
        """POST /keys; see :meth:`Client.create_key`."""
        return await self._send(_create_key(name, role, expires_in_s, namespace))

    async def keys(self) -> KeyPage:
        """GET /keys; see :meth:`Client.keys`."""
        return await self._send(_keys())

    async def rotate_key(self, key_id: str, grace_s: int | None = None) -> KeySecret:
        """POST /keys/{id}/rotate; see :meth:`Client.rotate_key`."""
        return await self._send(_rotate_key(key_id, grace_s))

    async def revoke_key(self, key_id: str) -> None:
        """DELETE /keys/{id}; see :meth:`Client.revoke_key`."""
        await self._send(_revoke_key(key_id))

    async def namespaces(self) -> NamespacePage:
        """GET /namespaces (admin): every namespace and its quotas, ``default`` first."""
        return await self._send(_namespaces())

    async def namespace(self, name: str) -> Namespace:
        """GET /namespaces/{name}: its quotas and usage (admin, or a key of it)."""
        return await self._send(_namespace(name))

    async def put_namespace(self, name: str, **quotas: int) -> Namespace:
        """PUT /namespaces/{name} (admin): declare it, or replace its quotas whole."""
        return await self._send(_put_namespace(name, quotas))

    async def delete_namespace(self, name: str) -> None:
        """DELETE /namespaces/{name} (admin): only once it holds no queue or schedule."""
        await self._send(_delete_namespace(name))

    async def audit(self, limit: int = 100, before: str | None = None) -> AuditPage:
        """GET /audit; see :meth:`Client.audit`."""
        return await self._send(_audit(limit, before))

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

    async def stream_token(self, run_id: str, *, tree: bool = False) -> StreamToken:
        """POST /runs/{id}/stream-token: a short-lived token a browser follows the run with.

        Hand ``token`` to a page: ``new EventSource(url + '?access_token=' + token)``
        reads that run's events (``tree``: its tree, ``?include=children``) and nothing else.
        """
        return await self._send(_stream_token(run_id, tree))

    async def lease(self, run_id: str) -> LeaseView:
        """GET /leases/{id}: the run's owner, fence and lease expiry now (Redis clock)."""
        return await self._send(_lease(run_id))

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

    async def builds(self) -> list[BuildInfo]:
        """GET /builds: each build's workers, the runs pinned to it, and ``drained``."""
        return await self._send(_builds())

    async def build(self, build_id: str) -> BuildInfo:
        """GET /builds/{id}: one build (one nobody runs or needs is ``drained``)."""
        return await self._send(_build(build_id))

    async def upgrade(self, run_id: str, build_id: str | None = None) -> Run:
        """POST /runs/{id}/upgrade: move a pinned run to ``build_id``, or to none."""
        return await self._send(_upgrade(run_id, build_id))

    async def upgrade_build(
        self,
        build_id: str,
        *,
        to_build_id: str | None = None,
        queue: str | None = None,
        handler: str | None = None,
        limit: int | None = None,
    ) -> UpgradeSummary:
        """POST /builds/{id}/upgrade: move up to ``limit`` of its pinned runs."""
        body = {"to_build_id": to_build_id, "queue": queue, "handler": handler, "limit": limit}
        return await self._send(_upgrade_build(build_id, body))

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
