"""A redis-server of the test's own with a small ``maxmemory``, to fill on purpose.

Never the session's server: other tests share it, and filling it would fail
them. Each test gets a fresh one (started in well under a second), so no test
sees another's leftovers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from app.api.app import create_app
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.store.lua.scripts import Scripts
from app.store.redis.connection import async_client
from app.store.runs.store import RunStore
from tests.support.processes import Processes, base_env

HIGH_WATER = 0.6


@dataclass
class SmallRedis:
    """A server whose maxmemory the test sets and moves."""

    server: EmbeddedRedis

    @property
    def url(self) -> str:
        """The URL clients connect with."""
        return self.server.url

    def client(self) -> redis.Redis:
        """A plain sync client (answers decoded)."""
        return redis.Redis.from_url(self.url, decode_responses=True)

    def used_bytes(self) -> int:
        """``used_memory`` now."""
        with self.client() as client:
            return int(client.info("memory")["used_memory"])

    def set_max(self, max_bytes: int) -> None:
        """CONFIG SET maxmemory (0: none)."""
        with self.client() as client:
            client.config_set("maxmemory", max_bytes)

    def load_scripts(self) -> None:
        """SCRIPT LOAD every transition, as an API or worker does when it starts.

        The scripts take ~2 MB of Redis memory (script cache and Lua), growing with
        each new one: loaded before :meth:`allow` measures, they are not counted in a
        headroom meant for runs. In a thread of its own, so a test whose thread runs
        an event loop (Playwright's, an async test's) can call it too.
        """

        async def load() -> None:
            client = async_client(self.url)
            try:
                await Scripts().load_all(client)
            finally:
                await client.aclose()

        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, load()).result()

    def allow(self, headroom_bytes: int) -> int:
        """Set maxmemory to what is used, scripts loaded, plus ``headroom_bytes``; returns it."""
        self.load_scripts()
        max_bytes = self.used_bytes() + headroom_bytes
        self.set_max(max_bytes)
        return max_bytes

    def oom_refusals(self) -> int:
        """How many commands Redis has refused with OOM since it started (INFO errorstats)."""
        with self.client() as client:
            stats = client.info("errorstats")
        entry = stats.get("errorstat_OOM")
        return int(entry["count"]) if isinstance(entry, dict) else 0


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[SmallRedis]:
    """A fresh noeviction redis-server for this test alone; maxmemory set by the test."""
    server = EmbeddedRedis(data_dir=tmp_path / "small-redis", appendonly=False, log_file=None)
    server.start()
    try:
        yield SmallRedis(server)
    finally:
        server.stop()


@pytest.fixture
def small_processes(small_redis: SmallRedis, prefix: str, tmp_path: Path) -> Iterator[Processes]:
    """Workers and APIs on the small Redis (the test's prefix, 1 s leases); reaped after."""
    procs = Processes(base_env(small_redis.url, prefix, lease_ttl_s=1.0), tmp_path)
    yield procs
    procs.reap()


@pytest.fixture
async def small_store(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> AsyncIterator[RunStore]:
    """A run store on the small Redis and the test's prefix."""
    client = async_client(small_redis.url)
    settings = Settings(redis_url=small_redis.url, prefix=prefix, state_dir=tmp_path / "store")
    yield RunStore.for_settings(client, Scripts(), settings)
    await client.aclose()


def memory_settings(
    small_redis: SmallRedis, prefix: str, tmp_path: Path, *, check_interval_s: float = 0.05
) -> Settings:
    """Settings on the small Redis: a 60 % high-water mark, memory read every 50 ms."""
    return Settings(
        redis_url=small_redis.url,
        prefix=prefix,
        state_dir=tmp_path / "state",
        queues=["default", "filler"],
        handlers=["app.demo"],  # no handler is registered by default
        memory_high_water=HIGH_WATER,
        memory_check_interval_s=check_interval_s,
    )


@asynccontextmanager
async def start_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process API on ``settings``, its lifespan run, and a client of it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client
