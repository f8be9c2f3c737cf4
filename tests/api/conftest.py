"""An in-process API (ASGI transport, lifespan run) on the test's Redis and prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.app import create_app
from app.settings import Settings

# the bootstrap (admin) key of the keyed app: LEASEHOLD_API_KEYS
BOOTSTRAP = "k-bootstrap-0123456789abcdef"


@asynccontextmanager
async def api_with(settings: Settings, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """httpx client talking to create_app(settings with ``overrides``) in this process."""
    app = create_app(settings.model_copy(update=overrides) if overrides else settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """httpx client talking to create_app(settings) in this process."""
    async with api_with(settings) as client:
        yield client


@pytest.fixture
def keyed_settings(settings: Settings) -> Settings:
    """The test's settings with authentication on: :data:`BOOTSTRAP` is the admin key."""
    return settings.model_copy(update={"api_keys": [BOOTSTRAP]})


@pytest.fixture
async def keyed_app(keyed_settings: Settings) -> AsyncIterator[FastAPI]:
    """The app of ``keyed_settings``, its lifespan running."""
    app = create_app(keyed_settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def keyed_api(keyed_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """httpx client talking to ``keyed_app`` in this process."""
    transport = httpx.ASGITransport(app=keyed_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client
