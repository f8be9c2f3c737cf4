"""RFC 9457 problem+json responses for every error the API returns.

Clients get a stable shape (type, title, status, detail, errors) and never a
stack trace; anything unexpected becomes a 500 with a generic message and the
details go to the log. Any Redis error is a 503 with ``Retry-After`` whose
``type`` says which: ``store-unavailable`` (no answer), ``store-busy`` (no free
connection), ``redis-out-of-memory``, ``redis-read-only`` (a failover),
``store-error`` (anything else Redis answered), and ``admission-refused`` when
Leasehold itself turned a create away because Redis memory is past the
high-water mark.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.admission import RETRY_AFTER_S as STREAM_RETRY_AFTER_S
from app.errors import (
    AlreadyRetried,
    CapacityExceeded,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    MemoryPressure,
    OperationConflict,
    OperationNotFound,
    QueueLimitReached,
    QueueNotDeclared,
    QueueNotEmpty,
    QuotaExceeded,
    RateLimitNotDeclared,
    RateLimitsFull,
    RunNotFound,
    SignalInboxFull,
    SingletonConflict,
    UnknownHandler,
)
from app.store.redis.connection import PoolExhausted, TlsHandshakeFailed
from app.store.redis.refusals import Refusal, refusal_of
from app.store.runs.positions import InvalidCursor

# a full signal inbox empties as the run's waits take its signals
SIGNAL_RETRY_AFTER_S = 5

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://leasehold.dev/problems/"
STORE_RETRY_AFTER_S = 1
# memory frees as finished runs expire or are deleted: seconds at best, not at once
MEMORY_RETRY_AFTER_S = 5

# (type, title, detail, Retry-After) of each other way Redis can refuse a request
_REFUSALS: dict[Refusal | None, tuple[str, str, str, int]] = {
    "unavailable": (
        "store-unavailable",
        "Run store unavailable",
        "Redis cannot be reached; retry shortly",
        STORE_RETRY_AFTER_S,
    ),
    "out_of_memory": (
        "redis-out-of-memory",
        "Run store out of memory",
        "Redis refused the write: it is at maxmemory; retry once memory frees",
        MEMORY_RETRY_AFTER_S,
    ),
    "read_only": (
        "redis-read-only",
        "Run store read-only",
        "Redis refused the write: the node is read-only (a failover?); retry shortly",
        STORE_RETRY_AFTER_S,
    ),
    None: (
        "store-error",
        "Run store error",
        "Redis could not complete the request; retry shortly",
        STORE_RETRY_AFTER_S,
    ),
}

ExceptionHandler = Callable[[Request, Exception], Awaitable["ProblemResponse"]]


class ProblemResponse(JSONResponse):
    """A JSONResponse with the problem+json media type."""

    media_type = PROBLEM_JSON


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    kind: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    extensions: dict[str, Any] | None = None,
) -> ProblemResponse:
    """Build a problem+json response; ``extensions``: RFC 9457 extension members."""
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + kind if kind else "about:blank",
        "title": title,
        "status": status,
    }
    if detail:
        body["detail"] = detail
    if errors is not None:
        body["errors"] = errors
    body.update(extensions or {})
    return ProblemResponse(body, status_code=status, headers=headers)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": list(error.get("loc", ())),
            "msg": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in exc.errors()
    ]


def store_outage(what: str) -> ProblemResponse:
    """503 ``store-unavailable`` for a middleware that could not read ``what`` from Redis
    (before any route: no exception handler sees it)."""
    return unavailable(
        "Run store unavailable",
        f"cannot read {what}: Redis cannot be reached; retry shortly",
        kind="store-unavailable",
        retry_after_s=STORE_RETRY_AFTER_S,
    )


def unavailable(title: str, detail: str, *, kind: str, retry_after_s: int) -> ProblemResponse:
    """A 503 problem that says when to try again: for anything that waiting fixes."""
    return problem(503, title, detail, kind=kind, headers={"Retry-After": str(retry_after_s)})


def _store_problem(title: str, detail: str, *, kind: str, logged: str) -> ExceptionHandler:
    """A handler for a Redis failure on a request path: logged in one line, never a traceback."""

    async def handle(request: Request, exc: Exception) -> ProblemResponse:
        log.warning("%s on %s %s: %s", logged, request.method, request.url.path, exc)
        return unavailable(title, detail, kind=kind, retry_after_s=STORE_RETRY_AFTER_S)

    return handle


# an outage, not a bug
store_unavailable = _store_problem(
    "Run store unavailable",
    "Redis cannot be reached; retry shortly",
    kind="store-unavailable",
    logged="redis unavailable",
)
# every Redis connection of the pool stayed busy: too much at once, not an outage
store_busy = _store_problem(
    "Run store busy",
    "every Redis connection of this API process is in use; retry shortly",
    kind="store-busy",
    logged="redis pool exhausted",
)


async def store_refused(request: Request, exc: Exception) -> ProblemResponse:
    """503 for any other Redis error, typed by :func:`refusal_of`: Redis trouble is never a 500.

    Refusals that pass on their own (full, read-only, a cluster mid-failover) are
    logged in one line; any other Redis error with its traceback: it may be a bug.
    """
    reason = refusal_of(exc)
    kind, title, detail, retry_after_s = _REFUSALS[reason]
    where = f"{request.method} {request.url.path}"
    if reason is None:
        log.error("redis error on %s", where, exc_info=exc)
    else:
        log.warning("redis refused %s (%s): %s", where, kind, exc)
    return unavailable(title, detail, kind=kind, retry_after_s=retry_after_s)


async def memory_pressure(request: Request, exc: Exception) -> ProblemResponse:
    """503 ``admission-refused``: Leasehold keeps Redis's last headroom for running work."""
    return unavailable(
        "Not accepting new runs: Redis memory is nearly full",
        str(exc),
        kind="admission-refused",
        retry_after_s=MEMORY_RETRY_AFTER_S,
    )


async def quota_exceeded(request: Request, exc: Exception) -> ProblemResponse:
    """429 ``quota-exceeded``: the namespace's own quota, named, and when to ask again."""
    assert isinstance(exc, QuotaExceeded)
    return quota_problem(exc)


def quota_problem(exc: QuotaExceeded) -> ProblemResponse:
    """The 429 of a quota refusal (also answered by the middleware, before any route)."""
    return problem(
        429,
        "Quota exceeded",
        str(exc),
        kind="quota-exceeded",
        headers={"Retry-After": str(exc.retry_after_s)},
        extensions={"quota": exc.quota, "limit": exc.limit, "namespace": exc.namespace},
    )


async def at_capacity(request: Request, exc: Exception) -> ProblemResponse:
    """503 past a per-process stream cap: waiting helps, so Retry-After says how long."""
    return unavailable(
        "Too many event streams",
        f"{exc}; retry shortly",
        kind="stream-capacity",
        retry_after_s=STREAM_RETRY_AFTER_S,
    )


async def inbox_full(request: Request, exc: Exception) -> ProblemResponse:
    """429 for a run's full signal inbox: its waits take signals, so later there may be room."""
    return problem(
        429,
        "Signal inbox is full",
        str(exc),
        kind="signal-inbox-full",
        headers={"Retry-After": str(SIGNAL_RETRY_AFTER_S)},
    )


def _install_queue_problems(app: FastAPI) -> None:
    """A run on an undeclared queue is the caller's mistake (422); a full set is 409."""

    @app.exception_handler(QueueNotDeclared)
    async def undeclared_queue(request: Request, exc: QueueNotDeclared) -> ProblemResponse:
        return problem(422, "Queue is not declared", str(exc), kind="queue-not-declared")

    @app.exception_handler(QueueLimitReached)
    async def queue_limit(request: Request, exc: QueueLimitReached) -> ProblemResponse:
        return problem(409, "Too many queues are declared", str(exc), kind="queue-limit-reached")

    @app.exception_handler(QueueNotEmpty)
    async def queue_not_empty(request: Request, exc: QueueNotEmpty) -> ProblemResponse:
        return problem(409, "Queue cannot be undeclared", str(exc), kind="queue-not-empty")


def _install_retry_problems(app: FastAPI) -> None:
    """Re-runs: a second re-run of a run whose re-run still exists is a 409 naming it;
    a bulk retry that is unknown is a 404, one that is finished or driven elsewhere a 409."""

    @app.exception_handler(AlreadyRetried)
    async def already_retried(request: Request, exc: AlreadyRetried) -> ProblemResponse:
        return problem(409, "Run was already re-run", str(exc), kind="already-retried")

    @app.exception_handler(OperationNotFound)
    async def no_operation(request: Request, exc: OperationNotFound) -> ProblemResponse:
        return problem(404, "Operation not found", str(exc), kind="operation-not-found")

    @app.exception_handler(OperationConflict)
    async def operation_conflict(request: Request, exc: OperationConflict) -> ProblemResponse:
        return problem(409, "Operation cannot do that now", str(exc), kind="operation-conflict")


def _install_rate_limit_problems(app: FastAPI) -> None:
    """A run naming an undeclared rate-limit key is the caller's mistake (422); full: 409."""

    @app.exception_handler(RateLimitNotDeclared)
    async def undeclared_key(request: Request, exc: RateLimitNotDeclared) -> ProblemResponse:
        status = 404 if request.url.path.startswith("/rate-limits/") else 422
        return problem(
            status, "Rate-limit key is not declared", str(exc), kind="rate-limit-not-declared"
        )

    @app.exception_handler(RateLimitsFull)
    async def keys_full(request: Request, exc: RateLimitsFull) -> ProblemResponse:
        return problem(
            409, "Too many rate-limit keys are declared", str(exc), kind="rate-limits-full"
        )


def _install_flow_problems(app: FastAPI) -> None:
    """A singleton key another run holds is a conflict the caller chose to be told of (409)."""

    @app.exception_handler(SingletonConflict)
    async def singleton(request: Request, exc: SingletonConflict) -> ProblemResponse:
        return problem(
            409,
            "A run of this singleton key is active or queued",
            str(exc),
            kind="singleton-conflict",
            extensions={"singleton_key": exc.key, "run_id": exc.run_id},
        )


def install_problem_handlers(app: FastAPI) -> None:
    """Map every exception the API can raise to its problem response.

    Starlette picks a handler by the exception's class hierarchy (the most specific
    class wins), not by registration order; the order here is kept stable anyway.
    """
    _install_queue_problems(app)
    _install_retry_problems(app)
    _install_rate_limit_problems(app)
    _install_flow_problems(app)
    _install_request_problems(app)
    _install_run_problems(app)
    _install_try_later_problems(app)
    _install_unexpected_problem(app)


def _install_request_problems(app: FastAPI) -> None:
    """An error a route raised itself keeps its status, typed; a body or query that does
    not match the schema is a 422 listing each mismatch."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> ProblemResponse:
        return problem(
            exc.status_code,
            _title(exc.status_code),
            str(exc.detail),
            kind=_HTTP_KINDS.get(exc.status_code, "http-error"),
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> ProblemResponse:
        return problem(
            422,
            "Request is invalid",
            "the request does not match the API schema",
            kind="invalid-request",
            errors=_validation_errors(exc),
        )


def _install_run_problems(app: FastAPI) -> None:
    """A run asked for the wrong way: an unknown handler or bad input (422), no such run
    (404), a state or idempotency key that forbids it (409), a cursor not ours (400)."""

    @app.exception_handler(UnknownHandler)
    async def unknown_handler(request: Request, exc: UnknownHandler) -> ProblemResponse:
        return problem(422, "Unknown handler", str(exc), kind="unknown-handler")

    @app.exception_handler(InvalidInput)
    async def invalid_input(request: Request, exc: InvalidInput) -> ProblemResponse:
        return problem(
            422,
            "Input is invalid for this handler",
            str(exc),
            kind="invalid-input",
            errors=exc.problems,
        )

    @app.exception_handler(RunNotFound)
    async def not_found(request: Request, exc: RunNotFound) -> ProblemResponse:
        return problem(404, "Run not found", str(exc), kind="run-not-found")

    @app.exception_handler(InvalidTransition)
    async def conflict(request: Request, exc: InvalidTransition) -> ProblemResponse:
        return problem(
            409, "Run is not in a state that allows this", str(exc), kind="invalid-transition"
        )

    @app.exception_handler(IdempotencyConflict)
    async def idempotency(request: Request, exc: IdempotencyConflict) -> ProblemResponse:
        return problem(
            409,
            "Idempotency key reused with a different body",
            str(exc),
            kind="idempotency-conflict",
        )

    @app.exception_handler(InvalidCursor)
    async def bad_cursor(request: Request, exc: InvalidCursor) -> ProblemResponse:
        return problem(400, "Invalid cursor", str(exc), kind="invalid-cursor")


def _install_try_later_problems(app: FastAPI) -> None:
    """Refusals that waiting cures, each a 503 or 429 with Retry-After: a full stream cap
    or signal inbox, any Redis error (typed), Redis memory past the high-water mark."""
    app.add_exception_handler(CapacityExceeded, at_capacity)
    app.add_exception_handler(SignalInboxFull, inbox_full)
    app.add_exception_handler(RedisConnectionError, store_unavailable)
    app.add_exception_handler(RedisTimeoutError, store_unavailable)
    # more specific than ConnectionError, so these win for a full pool
    app.add_exception_handler(PoolExhausted, store_busy)
    app.add_exception_handler(MaxConnectionsError, store_busy)
    # every other Redis error (full, read-only, ...), typed; the most specific class wins
    app.add_exception_handler(RedisError, store_refused)
    app.add_exception_handler(RedisClusterException, store_refused)
    app.add_exception_handler(MemoryPressure, memory_pressure)
    app.add_exception_handler(QuotaExceeded, quota_exceeded)
    # a TLS URL against a plaintext port: Redis is unreachable as configured
    app.add_exception_handler(TlsHandshakeFailed, store_unavailable)


def _install_unexpected_problem(app: FastAPI) -> None:
    """Anything else is a 500 with a generic message; the traceback goes to the log only."""

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> ProblemResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "Internal error", "the server could not complete the request")


# the type of an error a route raised itself (HTTPException): never about:blank
_HTTP_KINDS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    413: "request-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    503: "service-unavailable",
}


def _title(status: int) -> str:
    titles = {
        400: "Bad request",
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        406: "Not acceptable",
        409: "Conflict",
        413: "Request body too large",
        415: "Unsupported media type",
        422: "Request is invalid",
        503: "Service unavailable",
    }
    return titles.get(status, "Error")
