"""What the API's lifespan builds once per process and every route shares."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis
from fastapi import Request

from app.executor.registry import HandlerRegistry
from app.settings import Settings
from app.store.runs import RunStore
from app.store.scripts import Scripts


@dataclass
class ApiState:
    """The Redis client, scripts, store and handler registry of one API process."""

    settings: Settings
    client: aioredis.Redis
    scripts: Scripts
    store: RunStore
    registry: HandlerRegistry


def api_state(request: Request) -> ApiState:
    """FastAPI dependency: the process's :class:`ApiState`."""
    state: ApiState = request.app.state.leasehold
    return state
