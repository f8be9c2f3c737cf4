"""Errors a client sees: problem+json, no stack traces, and 503 when Redis is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.api.app import create_app
from app.settings import Settings
from app.stack.embedded import free_port


class Boom(Exception):
    """Stands for a bug: an exception no handler expects."""


@pytest.fixture
async def buggy_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)

    @app.get("/boom")
    async def boom() -> None:
        raise Boom("secret detail at /srv/app/internal.py line 42")

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_an_unexpected_error_is_a_500_problem_without_details(
    buggy_api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    response = await buggy_api.get("/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": "Internal error",
        "status": 500,
        "detail": "the server could not complete the request",
    }
    for leak in ("Traceback", "secret detail", "Boom", ".py"):
        assert leak not in response.text
    assert "secret detail" in caplog.text, "the details go to the log instead"


@pytest.fixture
def app_without_redis(tmp_path: Path) -> FastAPI:
    # a port nothing listens on: every Redis call fails to connect
    return create_app(
        Settings(
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            state_dir=tmp_path / "state",
            handlers=["app.demo"],
        )
    )


@pytest.fixture
async def api_without_redis(app_without_redis: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app_without_redis.router.lifespan_context(app_without_redis):
        transport = httpx.ASGITransport(app=app_without_redis, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("GET", "/runs"),
        ("GET", "/workers"),
        ("POST", "/runs/default.01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel"),
    ],
)
async def test_redis_down_is_a_503_problem_with_retry_after(
    api_without_redis: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await api_without_redis.request(method, path)
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "1"
    assert response.json()["title"] == "Run store unavailable"


async def test_readiness_reports_redis_down_and_liveness_does_not_care(
    api_without_redis: httpx.AsyncClient,
) -> None:
    ready = await api_without_redis.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert ready.json()["redis_reachable"] is False
    assert (await api_without_redis.get("/healthz")).status_code == 200
