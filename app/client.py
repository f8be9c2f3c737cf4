"""HTTP clients for Leasehold's API (httpx), sync and async, used by the CLI and users.

Errors come back as :class:`ApiError` carrying the problem+json body.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.errors import LeaseholdError
from app.models import CancelResult, HandlerInfo, Run, RunPage, WorkerInfo

DEFAULT_TIMEOUT_S = 30.0


class ApiError(LeaseholdError):
    """The API answered with an error status; ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or "error"
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.problem = problem


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


def _create_body(handler: str, input: Any, options: dict[str, Any]) -> dict[str, Any]:
    body = {"handler": handler, "input": input if input is not None else {}}
    body.update({key: value for key, value in options.items() if value is not None})
    return body


def _list_params(**filters: Any) -> dict[str, Any]:
    return {key: value for key, value in filters.items() if value is not None}


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
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def create(self, handler: str, input: Any = None, **options: Any) -> Run:
        """POST /runs; options are the other CreateRunRequest fields."""
        response = self.http.post("/runs", json=_create_body(handler, input, options))
        return Run.model_validate(_check(response).json())

    def get(self, run_id: str) -> Run:
        """GET /runs/{id}."""
        return Run.model_validate(_check(self.http.get(f"/runs/{run_id}")).json())

    def list_runs(self, **filters: Any) -> RunPage:
        """GET /runs with queue/status/handler/limit/cursor filters."""
        response = self.http.get("/runs", params=_list_params(**filters))
        return RunPage.model_validate(_check(response).json())

    def cancel(self, run_id: str) -> CancelResult:
        """POST /runs/{id}/cancel."""
        response = self.http.post(f"/runs/{run_id}/cancel")
        return CancelResult.model_validate(_check(response).json())

    def handlers(self) -> list[HandlerInfo]:
        """GET /handlers."""
        return [
            HandlerInfo.model_validate(item) for item in _check(self.http.get("/handlers")).json()
        ]

    def workers(self) -> list[WorkerInfo]:
        """GET /workers."""
        return [
            WorkerInfo.model_validate(item) for item in _check(self.http.get("/workers")).json()
        ]


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
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def create(self, handler: str, input: Any = None, **options: Any) -> Run:
        """POST /runs; options are the other CreateRunRequest fields."""
        response = await self.http.post("/runs", json=_create_body(handler, input, options))
        return Run.model_validate(_check(response).json())

    async def get(self, run_id: str) -> Run:
        """GET /runs/{id}."""
        return Run.model_validate(_check(await self.http.get(f"/runs/{run_id}")).json())

    async def list_runs(self, **filters: Any) -> RunPage:
        """GET /runs with queue/status/handler/limit/cursor filters."""
        response = await self.http.get("/runs", params=_list_params(**filters))
        return RunPage.model_validate(_check(response).json())

    async def cancel(self, run_id: str) -> CancelResult:
        """POST /runs/{id}/cancel."""
        response = await self.http.post(f"/runs/{run_id}/cancel")
        return CancelResult.model_validate(_check(response).json())
