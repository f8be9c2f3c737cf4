"""The API's calls, one request spec per method: what both clients send, how they read the answer.

Each API method is one :class:`_Call` (method, path, body or query, and the decoder of
its 2xx answer) built by one function here; :class:`~app.client.Client` and
:class:`~app.client.AsyncClient` only send specs, so the two cannot drift apart. An
error status comes back as :class:`ApiError` carrying the problem+json body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

# first: httpx without its command-line client (rich, pygments, click), before httpx_sse
from app.httpx_import import httpx

# isort: split
from pydantic import BaseModel

# ApiError lives with the other errors (a light `runs get` raises it without this module)
from app.errors import ApiError
from app.models import Run, WorkerInfo
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
from app.namespaces import NAMESPACE_HEADER

DEFAULT_TIMEOUT_S = 30.0

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def _headers(api_key: str | None, namespace: str | None = None) -> dict[str, str]:
    """The headers every call sends: the key, and the namespace it addresses (none: the
    key's own, or the API's LEASEHOLD_NAMESPACE)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if namespace:
        headers[NAMESPACE_HEADER] = namespace
    return headers


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        try:
            body = response.json()
        except ValueError:
            body = {"title": response.text or response.reason_phrase}
        raise ApiError(response.status_code, body if isinstance(body, dict) else {})
    return response


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


def _history(run_id: str, max_events: int | None) -> _Call[RunHistory]:
    params = _present({"max_events": max_events})
    return _Call("GET", f"/runs/{run_id}/history", RunHistory.model_validate, params=params)


def _cancel(run_id: str) -> _Call[StatusChange]:
    return _Call("POST", f"/runs/{run_id}/cancel", StatusChange.model_validate)


def _stream_token(run_id: str, tree: bool) -> _Call[StreamToken]:
    return _Call(
        "POST", f"/runs/{run_id}/stream-token", StreamToken.model_validate, json={"tree": tree}
    )


def _lease(run_id: str) -> _Call[LeaseView]:
    return _Call("GET", f"/leases/{run_id}", LeaseView.model_validate)


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


def _builds() -> _Call[list[BuildInfo]]:
    return _Call("GET", "/builds", _models(BuildInfo))


def _build(build_id: str) -> _Call[BuildInfo]:
    return _Call("GET", f"/builds/{quote(build_id, safe='')}", BuildInfo.model_validate)


def _upgrade(run_id: str, build_id: str | None) -> _Call[Run]:
    body = _present({"build_id": build_id})
    return _Call("POST", f"/runs/{run_id}/upgrade", Run.model_validate, json=body)


def _upgrade_build(build_id: str, body: dict[str, Any]) -> _Call[UpgradeSummary]:
    path = f"/builds/{quote(build_id, safe='')}/upgrade"
    return _Call("POST", path, UpgradeSummary.model_validate, json=_present(body))


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


def _create_key(
    name: str, role: str, expires_in_s: int | None, namespace: str | None
) -> _Call[KeySecret]:
    body = _present(
        {"name": name, "role": role, "expires_in_s": expires_in_s, "namespace": namespace}
    )
    return _Call("POST", "/keys", KeySecret.model_validate, json=body)


def _keys() -> _Call[KeyPage]:
    return _Call("GET", "/keys", KeyPage.model_validate)


def _rotate_key(key_id: str, grace_s: int | None) -> _Call[KeySecret]:
    body = _present({"grace_s": grace_s})
    return _Call("POST", f"/keys/{key_id}/rotate", KeySecret.model_validate, json=body)


def _revoke_key(key_id: str) -> _Call[None]:
    return _Call("DELETE", f"/keys/{key_id}", _nothing)


def _namespaces() -> _Call[NamespacePage]:
    return _Call("GET", "/namespaces", NamespacePage.model_validate)


def _namespace(name: str) -> _Call[Namespace]:
    return _Call("GET", f"/namespaces/{quote(name, safe='')}", Namespace.model_validate)


def _put_namespace(name: str, quotas: dict[str, int]) -> _Call[Namespace]:
    path = f"/namespaces/{quote(name, safe='')}"
    return _Call("PUT", path, Namespace.model_validate, json={"quotas": quotas})


def _delete_namespace(name: str) -> _Call[None]:
    return _Call("DELETE", f"/namespaces/{quote(name, safe='')}", _nothing)


def _audit(limit: int, before: str | None) -> _Call[AuditPage]:
    params = _present({"limit": limit, "before": before})
    return _Call("GET", "/audit", AuditPage.model_validate, params=params)
