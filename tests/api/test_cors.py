"""CORS: off by default; with LEASEHOLD_CORS_ORIGINS, only the named origins, before auth."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.api.app import create_app
from app.settings import Settings

ORIGIN = "https://app.example.com"
KEY = "k-cors-0123456789abcdef"
PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
}


@pytest.fixture
async def cors_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    configured = settings.model_copy(update={"cors_origins": [ORIGIN], "api_keys": [KEY]})
    app = create_app(configured)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_cors_is_off_by_default(api: httpx.AsyncClient) -> None:
    simple = await api.get("/handlers", headers={"Origin": ORIGIN})
    assert simple.status_code == 200
    assert "access-control-allow-origin" not in simple.headers
    preflight = await api.options("/runs", headers=PREFLIGHT)
    assert "access-control-allow-origin" not in preflight.headers


async def test_a_named_origin_gets_its_preflight_answered_without_a_key(
    cors_api: httpx.AsyncClient,
) -> None:
    response = await cors_api.options("/runs", headers=PREFLIGHT)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ORIGIN
    allowed = response.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type", "idempotency-key"} <= {
        header.strip() for header in allowed.split(",")
    }


async def test_the_real_request_from_a_named_origin_still_needs_its_key(
    cors_api: httpx.AsyncClient,
) -> None:
    refused = await cors_api.get("/runs", headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    allowed = await cors_api.get(
        "/runs", headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"}
    )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN


async def test_another_origin_gets_no_cors_headers(cors_api: httpx.AsyncClient) -> None:
    preflight = await cors_api.options(
        "/runs", headers={**PREFLIGHT, "Origin": "https://evil.example.net"}
    )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
