"""Leasehold on a 3-primary Redis Cluster: the core behaviours, with queues on different nodes.

Queue names are chosen with ``CLUSTER KEYSLOT`` so their hash slots land on
three different primaries; every test then works across nodes, never by luck
on one.
"""

from __future__ import annotations

import asyncio
import json
import select
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.client import AsyncClient
from app.models import RunStatus
from app.store.health import check_readiness
from app.store.lua.scripts import ReplicaAcks, ScriptCall, Scripts
from app.store.redis import connection
from app.store.redis.connection import async_client, sync_client
from app.store.runs.new import NewRun
from tests.support.failover import Deployment, deployment, kinds, submit
from tests.support.polling import eventually, owner_pid, wait_status
from tools.clusters import LocalCluster

pytestmark = pytest.mark.cluster

TTL_S = 1.0


@pytest.fixture
def queues(redis_cluster: LocalCluster, prefix: str) -> list[str]:
    """Three queues whose slots are served by three different primaries."""
    return redis_cluster.queues_on_distinct_primaries(prefix, 3)


@pytest.fixture
async def on_cluster(
    redis_cluster: LocalCluster, prefix: str, tmp_path: Path, queues: list[str]
) -> AsyncIterator[Deployment]:
    """Store and processes on the cluster; workers serve all three queues."""
    async with deployment(
        redis_cluster.url, prefix, tmp_path, lease_ttl_s=TTL_S, LEASEHOLD_QUEUES=",".join(queues)
    ) as deployed:
        yield deployed


async def test_one_worker_serving_every_queue_takes_runs_from_every_node(
    on_cluster: Deployment, redis_cluster: LocalCluster, queues: list[str], prefix: str
) -> None:
    primaries = {redis_cluster.primary_of(f"{prefix}:{{{queue}}}:ready").port for queue in queues}
    assert len(primaries) == 3
    worker = on_cluster.processes.worker()
    ids = [await submit(on_cluster.store, queue, message=queue) for queue in queues for _ in "ab"]
    for run_id in ids:
        done = await wait_status(on_cluster.store, run_id, RunStatus.SUCCEEDED)
        assert owner_pid(done) == worker.pid
        assert done.output == {"message": done.queue}
        assert await kinds(on_cluster.store, run_id) == ["created", "claimed", "succeeded"]


async def test_kill_9_of_the_owner_orphans_the_run_on_another_node(
    on_cluster: Deployment, queues: list[str]
) -> None:
    owner = on_cluster.processes.worker()
    run_id = await submit(on_cluster.store, queues[1], "demo.sleep", seconds=60)
    running = await wait_status(on_cluster.store, run_id, RunStatus.RUNNING)
    on_cluster.processes.worker()  # a survivor whose reconciler scans every queue
    owner.signal(signal.SIGKILL)
    orphaned = await wait_status(on_cluster.store, run_id, RunStatus.ORPHANED)
    assert orphaned.error is not None
    assert orphaned.error.message == "executor lease expired"
    assert orphaned.error.details["owner_id"] == running.owner_id
    assert (await kinds(on_cluster.store, run_id))[-1] == "orphaned"


async def test_a_paused_owner_past_its_lease_is_fenced_out_when_it_wakes(
    on_cluster: Deployment, queues: list[str]
) -> None:
    owner = on_cluster.processes.worker()
    run_id = await submit(on_cluster.store, queues[2], "demo.sleep", seconds=2.0)
    await wait_status(on_cluster.store, run_id, RunStatus.RUNNING)
    on_cluster.processes.worker()
    owner.signal(signal.SIGSTOP)
    orphaned = await wait_status(on_cluster.store, run_id, RunStatus.ORPHANED)
    events_at_takeover = await kinds(on_cluster.store, run_id)
    owner.signal(signal.SIGCONT)
    await eventually(
        lambda: asyncio.sleep(0, owner.log()),
        until=lambda log: any(sign in log for sign in ("lease lost", "lease_lost", "rejected")),
        what="the stale owner to notice it lost the lease",
    )
    after = await on_cluster.store.get(run_id)
    assert (after.status, after.fence, after.output) == (RunStatus.ORPHANED, orphaned.fence, None)
    assert await kinds(on_cluster.store, run_id) == events_at_takeover


async def test_sse_follows_and_resumes_a_run_whose_stream_is_on_another_node(
    on_cluster: Deployment, queues: list[str]
) -> None:
    _, url = on_cluster.processes.api()
    on_cluster.processes.worker()
    new = NewRun(handler="test.tokens", input={"count": 40, "gap_s": 0.02}, queue=queues[2])
    run_id = (await on_cluster.store.create(new)).run.id
    seen: list[str] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        http.stream("GET", f"/runs/{run_id}/events") as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                seen.append(line.removeprefix("id:").strip())
            if len(seen) == 10:
                break  # drop the connection mid-run
    async with AsyncClient(url) as client:
        rest = [event async for event in client.events(run_id, last_event_id=seen[-1])]
    stored = [event.id for event in await on_cluster.store.read_events(run_id)]
    assert seen + [event.id for event in rest] == stored
    assert rest[-1].type == "succeeded"


async def test_activity_of_queues_on_three_primaries_arrives_through_one_stream(
    on_cluster: Deployment, queues: list[str]
) -> None:
    # one blocking read cannot span slots: the feeds wait per queue, each on its node
    _, url = on_cluster.processes.api()
    query = "&".join(f"queue={queue}" for queue in queues)
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        http.stream("GET", f"/activity?{query}") as response,
    ):
        lines = response.aiter_lines()
        assert await anext(lines) != ""  # the ready message has begun
        created = {}
        for queue in queues:
            run = await http.post("/runs", json={"handler": "demo.echo", "queue": queue})
            created[run.json()["id"]] = queue
        seen: dict[str, str] = {}
        async for line in lines:
            if line.startswith("data:") and '"type":"created"' in line.replace(" ", ""):
                entry = json.loads(line.removeprefix("data:"))
                seen[entry["run_id"]] = entry["queue"]
            if len(seen) == len(created):
                break
    assert seen == created


async def test_the_api_reports_the_cluster_and_lists_runs_and_workers_across_nodes(
    on_cluster: Deployment, queues: list[str]
) -> None:
    _, url = on_cluster.processes.api()
    worker = on_cluster.processes.worker()
    ids = [await submit(on_cluster.store, queue) for queue in queues for _ in range(3)]
    for run_id in ids:
        await wait_status(on_cluster.store, run_id, RunStatus.SUCCEEDED)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        ready = (await http.get("/readyz")).json()
        listed: list[str] = []
        cursor = None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/runs", params=params)).json()
            listed.extend(item["id"] for item in page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        one = (await http.get(f"/runs/{ids[4]}")).json()
        live = (await http.get("/workers")).json()
        metrics = await http.get("/metrics")  # queue depths, read from each queue's node
    assert ready["status"] == "ready" and ready["mode"] == "cluster"
    primaries = [node for node in ready["topology"]["nodes"] if node["role"] == "primary"]
    assert len(primaries) == 3 and all(node["slots"] for node in primaries)
    assert ready["problems"] == []
    # newest first (created_at ms, then id), each once, across three nodes
    runs = [await on_cluster.store.get(run_id) for run_id in ids]
    newest_first = sorted(runs, key=lambda run: (run.created_at, run.id), reverse=True)
    assert listed == [run.id for run in newest_first]
    assert one["id"] == ids[4] and one["queue"] == queues[1]
    assert [info["pid"] for info in live] == [worker.pid]
    assert metrics.status_code == 200
    assert all(f'queue="{queue}"' in metrics.text for queue in queues)


async def test_a_primary_that_lost_its_scripts_is_served_again_without_an_error(
    on_cluster: Deployment, redis_cluster: LocalCluster, queues: list[str], prefix: str
) -> None:
    await on_cluster.store.scripts.load_all(on_cluster.client)
    assert await on_cluster.store.scripts.loaded(on_cluster.client)
    node = redis_cluster.primary_of(f"{prefix}:{{{queues[0]}}}:ready")
    with node.client() as direct:
        direct.script_flush()  # as after a restart, or a replica promoted without them
    assert not await on_cluster.store.scripts.loaded(on_cluster.client)
    on_cluster.processes.worker()
    run_id = await submit(on_cluster.store, queues[0])
    await wait_status(on_cluster.store, run_id, RunStatus.SUCCEEDED)


async def test_replica_acks_without_replicas_are_reported_and_only_delay_writes(
    on_cluster: Deployment, queues: list[str]
) -> None:
    scripts = Scripts(replica_acks=ReplicaAcks(replicas=1, timeout_ms=50))
    readiness = await check_readiness(on_cluster.client, scripts)
    assert readiness.ready
    assert len([p for p in readiness.problems if "LEASEHOLD_REPLICA_ACKS=1" in p]) == 3
    on_cluster.store.scripts = scripts
    run_id = await submit(on_cluster.store, queues[1])
    assert (await on_cluster.store.get(run_id)).status == RunStatus.QUEUED
    assert scripts.short_acks == 1  # WAIT ran on the run's own node, and came back short


def test_the_heartbeat_client_renews_on_the_node_of_each_queue(
    redis_cluster: LocalCluster, queues: list[str], prefix: str
) -> None:
    client = sync_client(redis_cluster.url, socket_timeout_s=0.5, retries=0)
    try:
        scripts = Scripts()
        for queue in queues:
            keys = [f"{prefix}:{{{queue}}}:leases", f"{prefix}:{{{queue}}}:run:"]
            assert (
                scripts.run_sync(client, ScriptCall("renew_leases", keys, ["w-x-1-0000", 1000]))
                == []
            )
        pipe = client.pipeline(transaction=False)  # the advertisement: keys on other slots
        pipe.set(f"{prefix}:worker:a", "1", px=1000)
        pipe.zadd(f"{prefix}:workers", {"a": 1})
        assert pipe.execute() == [True, 1]
    finally:
        client.close()


async def test_a_seed_that_accepts_but_never_answers_does_not_keep_a_client_from_starting(
    redis_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped node (SIGSTOP, a paused container) still completes TCP handshakes.

    redis-py reads the slot map from one seed at a time, in random order: a new
    client that tries the silent one first must give it up after the connect
    timeout and ask the next, not wait for its reply forever.
    """
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_S", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepts (the kernel does), never answers
        host, port = silent.getsockname()
        url = redis_cluster.url.replace("@", f"@{host}:{port},", 1)
        asked_silent = False
        for _ in range(30):  # until discovery happens to try the silent seed first
            client = async_client(url)
            try:
                await asyncio.wait_for(Scripts().load_all(client), 5)
            finally:
                await client.aclose()
            asked_silent = bool(select.select([silent], [], [], 0)[0])
            if asked_silent:
                break
        assert asked_silent, "discovery never tried the silent seed"
