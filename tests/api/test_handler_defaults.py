"""Per-handler defaults at create: run options > @handler(...) defaults > settings."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from app.models import RunStatus
from app.settings import Settings
from app.store.runs.store import RunStore
from tests.support.polling import wait_status
from tests.support.processes import Processes


async def test_a_run_that_names_nothing_gets_the_handlers_defaults(api: httpx.AsyncClient) -> None:
    run = (await api.post("/runs", json={"handler": "test.defaults", "input": {}})).json()
    assert run["max_attempts"] == 4
    assert run["on_lease_expired"] == "retry"


async def test_what_the_request_names_wins_over_the_handlers_defaults(
    api: httpx.AsyncClient, redis_client: aioredis.Redis, settings: Settings
) -> None:
    body = {
        "handler": "test.defaults",
        "input": {},
        "max_attempts": 2,
        "on_lease_expired": "orphan",
        "budget": {"max_duration_s": 30},
    }
    run = (await api.post("/runs", json=body)).json()
    assert run["max_attempts"] == 2
    assert run["on_lease_expired"] == "orphan"
    stored = await redis_client.hget(f"{settings.prefix}:{{default}}:run:{run['id']}", "budget")
    # the request's budget field joins the handler's max_steps instead of replacing it
    assert stored is not None and '"max_steps":7' in stored and '"max_duration_s":30' in stored


async def test_a_handler_without_defaults_gets_the_deployments_settings(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    run = (await api.post("/runs", json={"handler": "demo.echo", "input": {}})).json()
    assert run["max_attempts"] == settings.default_max_attempts
    assert run["on_lease_expired"] == settings.default_on_lease_expired


async def test_get_handlers_shows_each_handlers_defaults(api: httpx.AsyncClient) -> None:
    handlers = {item["name"]: item for item in (await api.get("/handlers")).json()}
    assert handlers["test.defaults"]["defaults"] == {
        "max_attempts": 4,
        "on_lease_expired": "retry",
        "retry_backoff_s": 0.2,
        "retry_backoff_max_s": 0.4,
        "budget": {"max_steps": 7},
    }
    assert handlers["demo.echo"]["defaults"] == {}


async def test_a_worker_retries_by_the_handlers_attempts_where_the_setting_allows_one(
    api: httpx.AsyncClient, processes: Processes, run_store: RunStore, settings: Settings
) -> None:
    """LEASEHOLD_DEFAULT_MAX_ATTEMPTS is 1; the handler's 4 lets two failures be retried."""
    assert settings.default_max_attempts == 1
    body = {"handler": "test.defaults", "input": {"fail_times": 2}}
    run = (await api.post("/runs", json=body)).json()
    processes.worker()
    done = await wait_status(run_store, run["id"], RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED
    assert done.output == {"attempt": 3}
    events = await run_store.read_events(run["id"])
    assert [event.type for event in events].count("claimed") == 3
