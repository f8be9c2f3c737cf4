"""An in-process API (ASGI transport, lifespan run) on the test's Redis and prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.api.app import create_app
from app.settings import Settings


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """httpx client talking to create_app(settings) in this process."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client
