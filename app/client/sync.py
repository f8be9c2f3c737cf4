"""The blocking client (httpx): the CLI's and a script's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

# first: httpx without its command-line client (rich, pygments, click), before httpx_sse
from app.httpx_import import httpx, verifies

# isort: split
from httpx_sse import ServerSentEvent, connect_sse

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


class Client:
    """Blocking client."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        namespace: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key, namespace),
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

    def history(self, run_id: str, max_events: int | None = None) -> RunHistory:
        """GET /runs/{id}/history: what ``app.testing.replay`` needs to replay the run; its
        events cut at ``max_events`` (the API's cap when None; ``events_truncated`` says so)."""
        return self._send(_history(run_id, max_events))

    def children(self, run_id: str, limit: int = 50, cursor: str | None = None) -> RunPage:
        """GET /runs/{id}/children: the runs it spawned, oldest first, as summaries."""
        return self._send(_children(run_id, limit, cursor))

    def cancel(self, run_id: str) -> StatusChange:
        """POST /runs/{id}/cancel."""
        return self._send(_cancel(run_id))

    def stream_token(self, run_id: str, *, tree: bool = False) -> StreamToken:
        """POST /runs/{id}/stream-token: a short-lived token a browser follows the run with.

        Hand ``token`` to a page: ``new EventSource(url + '?access_token=' + token)``
        reads that run's events (``tree``: its tree, ``?include=children``) and nothing else.
        """
        return self._send(_stream_token(run_id, tree))

    def lease(self, run_id: str) -> LeaseView:
        """GET /leases/{id}: the run's owner, fence and lease expiry now (Redis clock)."""
        return self._send(_lease(run_id))

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

    def builds(self) -> list[BuildInfo]:
        """GET /builds: each build's workers, the runs pinned to it, and ``drained``."""
        return self._send(_builds())

    def build(self, build_id: str) -> BuildInfo:
        """GET /builds/{id}: one build (one nobody runs or needs is ``drained``)."""
        return self._send(_build(build_id))

    def upgrade(self, run_id: str, build_id: str | None = None) -> Run:
        """POST /runs/{id}/upgrade: move a pinned run to ``build_id``, or to none."""
        return self._send(_upgrade(run_id, build_id))

    def upgrade_build(
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
        return self._send(_upgrade_build(build_id, body))

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

    def create_key(
        self,
        name: str,
        role: str,
        expires_in_s: int | None = None,
        namespace: str | None = None,
    ) -> KeySecret:
        """POST /keys (admin): a key with one role, bound to ``namespace`` when given; its
        secret is in the answer only."""
        return self._send(_create_key(name, role, expires_in_s, namespace))

    def keys(self) -> KeyPage:
        """GET /keys (admin): every live stored key, never a secret."""
        return self._send(_keys())

    def rotate_key(self, key_id: str, grace_s: int | None = None) -> KeySecret:
        """POST /keys/{id}/rotate (admin): a new secret; the old one works ``grace_s`` more."""
        return self._send(_rotate_key(key_id, grace_s))

    def revoke_key(self, key_id: str) -> None:
        """DELETE /keys/{id} (admin): both secrets stop (in other API processes within the
        key cache TTL)."""
        self._send(_revoke_key(key_id))

    def namespaces(self) -> NamespacePage:
        """GET /namespaces (admin): every namespace and its quotas, ``default`` first."""
        return self._send(_namespaces())

    def namespace(self, name: str) -> Namespace:
        """GET /namespaces/{name}: its quotas and usage (admin, or a key of it)."""
        return self._send(_namespace(name))

    def put_namespace(self, name: str, **quotas: int) -> Namespace:
        """PUT /namespaces/{name} (admin): declare it, or replace its quotas whole."""
        return self._send(_put_namespace(name, quotas))

    def delete_namespace(self, name: str) -> None:
        """DELETE /namespaces/{name} (admin): only once it holds no queue or schedule."""
        self._send(_delete_namespace(name))

    def audit(self, limit: int = 100, before: str | None = None) -> AuditPage:
        """GET /audit (admin): operate/admin calls, newest first; ``before`` a next_cursor."""
        return self._send(_audit(limit, before))

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
