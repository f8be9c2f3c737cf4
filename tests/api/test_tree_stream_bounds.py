"""What tree streams may cost, against a real API server and redis-server (issue 35).

The attack: each idle tree stream cost ~470 Redis commands a second on the API's
request pool, and of 150 at once 83 were refused and 11 ended mid-stream with a
traceback. Now their rounds run on a pool of their own, an idle one is held to
``IDLE_COMMANDS_PER_S``, past LEASEHOLD_SSE_MAX_TREE_STREAMS (or the followers'
cap) one gets 503 with Retry-After before its 200, and a round Redis fails is read
again rather than ending the stream. Each test has a redis-server of its own, so
the commands counted are this test's and a CLIENT KILL reaches no other test.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.api.tree import IDLE_COMMANDS_PER_S
from app.models import RunStatus
from app.store.redis.connection import async_client
from app.store.runs.store import RunStore
from bench.harness import counters
from tests.support.memory import SmallRedis
from tests.support.polling import eventually, wait_status
from tests.support.processes import Processes

CHILDREN = 30  # a round of the idle tree: TIME, then HGET, XRANGE, ZRANGEBYSCORE per child
pytestmark = pytest.mark.slow


@pytest.fixture
def own(small_redis: SmallRedis, small_processes: Processes) -> Processes:
    """Children on this test's own redis-server (no maxmemory), with a queue nobody serves."""
    small_redis.set_max(0)
    small_processes.env["LEASEHOLD_QUEUES"] = "default,kids"
    return small_processes


async def idle_tree(own: Processes, url: str, store: RunStore) -> str:
    """A parent that spawned CHILDREN children on a queue nobody serves, and ended; its id.

    Its worker is stopped after, so nothing in the tree moves and nobody else sends
    Redis anything but the API.
    """
    worker = own.worker("--queues", "default")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        body = {
            "handler": "test.fan_out",
            "input": {"children": CHILDREN, "queue": "kids", "on_parent_end": "detach"},
        }
        parent: str = (await http.post("/runs", json=body)).json()["id"]
    await wait_status(store, parent, RunStatus.SUCCEEDED)
    worker.stop()
    return parent


class Follower:
    """One stream held open by a task (the tree's, or the run's own): its status, its events."""

    def __init__(self, http: httpx.AsyncClient, run_id: str, *, tree: bool = True) -> None:
        self.status: int | None = None
        self.events: list[str] = []
        self.opened = asyncio.Event()
        params = {"include": "children"} if tree else {}
        self.task = asyncio.create_task(self._follow(http, f"/runs/{run_id}/events", params))

    async def _follow(self, http: httpx.AsyncClient, path: str, params: dict[str, str]) -> None:
        try:
            async with http.stream("GET", path, params=params) as response:
                self.status = response.status_code
                self.opened.set()
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        self.events.append(line.removeprefix("event:").strip())
        finally:
            self.opened.set()

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1] == "tree_ended"

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def follow(
    http: httpx.AsyncClient, run_id: str, n: int, *, tree: bool = True
) -> list[Follower]:
    followers = [Follower(http, run_id, tree=tree) for _ in range(n)]
    await asyncio.gather(*(f.opened.wait() for f in followers))
    return followers


async def commands_per_s(redis_url: str, window_s: float) -> float:
    client = async_client(redis_url)
    try:
        before = await counters(client)
        await asyncio.sleep(window_s)
        return (await counters(client)).minus(before).total / window_s
    finally:
        await client.aclose()


async def test_an_idle_tree_stream_costs_redis_at_most_its_idle_budget(
    own: Processes, small_store: RunStore, small_redis: SmallRedis
) -> None:
    _, url = own.api()
    parent = await idle_tree(own, url, small_store)
    baseline = await commands_per_s(small_redis.url, 4.0)
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        followers = await follow(http, parent, 6)
        assert [f.status for f in followers] == [200] * 6
        await asyncio.sleep(6.0)  # the rounds' pause has grown to its idle length
        spent = await commands_per_s(small_redis.url, 8.0) - baseline
        assert not any(f.task.done() for f in followers), "a stream ended mid-way"
        for follower in followers:
            await follower.close()
    # a round is 1 + 3 x 30 = 91 commands: one a second was 91/s per stream
    assert spent / 6 <= IDLE_COMMANDS_PER_S * 1.2, spent / 6


async def test_past_the_tree_cap_a_tree_stream_is_503_with_retry_after_before_its_200(
    own: Processes,
) -> None:
    _, url = own.api(LEASEHOLD_SSE_MAX_TREE_STREAMS="2", LEASEHOLD_SSE_MAX_FOLLOWERS="3")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        run_id = (await http.post("/runs", json={"handler": "demo.echo", "input": {}})).json()["id"]
        trees = await follow(http, run_id, 2)
        assert [f.status for f in trees] == [200, 200]
        over = await http.get(f"/runs/{run_id}/events", params={"include": "children"})
        assert over.status_code == 503, over.text
        assert over.headers["content-type"] == "application/problem+json"
        assert int(over.headers["retry-after"]) > 0
        assert "LEASEHOLD_SSE_MAX_TREE_STREAMS" in over.json()["detail"]
        # a tree stream is one of the followers too: one run stream fills them
        (plain,) = await follow(http, run_id, 1, tree=False)
        assert plain.status == 200
        full = await http.get(f"/runs/{run_id}/events")
        assert full.status_code == 503 and "LEASEHOLD_SSE_MAX_FOLLOWERS" in full.json()["detail"]
        scraped = {
            (sample.name, sample.labels.get("cap")): sample.value
            for family in text_string_to_metric_families((await http.get("/metrics")).text)
            for sample in family.samples
        }
        assert scraped[("leasehold_sse_tree_streams", None)] == 2
        assert scraped[("leasehold_sse_refused_total", "trees")] == 1
        await trees[0].close()
        await plain.close()
        again = await eventually(
            lambda: follow(http, run_id, 1),
            until=lambda found: found[0].status == 200,
            what="a slot given back",
        )
        for follower in [*again, trees[1]]:
            await follower.close()


async def test_tree_rounds_leave_requests_their_pool_and_outlive_dropped_connections(
    own: Processes, small_store: RunStore, small_redis: SmallRedis
) -> None:
    api, url = own.api(
        LEASEHOLD_REDIS_MAX_CONNECTIONS="2",
        LEASEHOLD_REDIS_POOL_TIMEOUT_S="0.5",
        LEASEHOLD_REDIS_REQUEST_TIMEOUT_S="0.3",
    )
    parent = await idle_tree(own, url, small_store)
    limits = httpx.Limits(max_connections=80)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        followers = await follow(http, parent, 20)
        assert [f.status for f in followers] == [200] * 20
        # while the 20 poll at their fastest, requests still find a connection
        answers = await asyncio.gather(*(http.get(f"/runs/{parent}") for _ in range(40)))
        assert [a.status_code for a in answers] == [200] * 40
        with small_redis.client() as admin:
            for _ in range(2):  # Redis silent past the request timeout: every round fails
                admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
                await asyncio.sleep(2.0)
        assert not any(f.task.done() for f in followers), "a stream ended when Redis went silent"
        own.worker("--queues", "kids")  # the children run: every stream reaches tree_ended
        await asyncio.wait_for(asyncio.gather(*(f.task for f in followers)), timeout=90)
    assert all(f.ended for f in followers), [f.events[-3:] for f in followers]
    assert all(f.events.count("succeeded") == CHILDREN + 1 for f in followers)
    log = api.log()
    assert "Traceback" not in log and "tree stream: round failed" in log
