"""A 1,000-child fan-out (issue 17): what spawning costs, and what fanning in costs.

One parent (``bench.fan``) spawns ``--n`` ``demo.echo`` children on a queue no
worker serves yet, then joins them (``mode="settled"``, parked). Measured, on the
benchmark's own redis-server:

* **create**: the parent's spawn loop, wall time and per child, and the Redis
  commands and read events (one per batch a client sent: round trips) from the
  parent's create until its spawns returned (the worker's heartbeats included);
* **fan-in**: a worker then starts on the children's queue; from its start to the
  parent's end, the wall time, the time from the last child's end to the parent's
  resume (the outbox delivery and the join's wake), the second pass's spawn replay,
  and the commands per child beyond what the same ``--n`` plain ``demo.echo`` runs
  cost on the same worker (the baseline, measured right after in the same window).

    .venv/bin/python -m bench.children --n 1000 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime
from typing import Any

from app.models import RunStatus
from app.settings import Settings
from app.store.family.tree import TreeStore
from app.store.lua.scripts import Scripts
from app.store.queues.store import QueueStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from bench import harness
from bench.handlers import FAN_KEY
from bench.harness import Bench, log

KIDS = "kids"
TERMINAL = {status.value for status in RunStatus if status.is_terminal}
POLL_S = 0.05
TIMEOUT_S = 600.0


async def until(what: str, check: Any) -> Any:
    """Poll ``check()`` until it returns something truthy; fail after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (got := await check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(POLL_S)
    return got


def cost(delta: harness.RedisCounters, n: int) -> dict[str, Any]:
    """Commands and read events (round trips) in all and per child."""
    reads = delta.reads - harness.COUNTER_READS
    return {
        "commands": delta.total,
        "commands_per_child": round(delta.total / n, 2),
        "round_trips": reads,
        "round_trips_per_child": round(reads / n, 2),
        "scripts_per_child": round(delta.scripts / n, 2),
    }


async def fan_rep(bench: Bench, n: int, tag: str) -> dict[str, Any]:
    """One repetition: spawn ``n`` children, then fan them in; then the plain baseline."""
    await bench.reset()
    await QueueStore.for_settings(
        bench.client, Scripts(), Settings(redis_url=bench.url)
    ).keep_declared(["default", KIDS])
    load = harness.load_average()
    env = bench.env(LEASEHOLD_QUEUES=f"default,{KIDS}")
    before = await harness.counters(bench.client)
    with harness.running(f"parent-{tag}", ["worker", "--queues", "default"], env):
        parent = (await bench.store.create(NewRun(handler="bench.fan", input={"n": n}))).run.id
        key = FAN_KEY.format(run_id=parent)
        await until("the spawns", lambda: bench.client.hget(key, "spawn_s"))
        create = (await harness.counters(bench.client)).minus(before)
        await until("the parent to park", lambda: _status_is(bench, parent, RunStatus.WAITING))
        before = await harness.counters(bench.client)
        t0 = time.time()
        with harness.running(
            f"kids-{tag}", ["worker", "--queues", KIDS, "--concurrency", "50"], env
        ):
            await until("the parent to end", lambda: _ended(bench, parent))
        fan_in = (await harness.counters(bench.client)).minus(before)
    measured = {k: float(v) for k, v in (await bench.client.hgetall(key)).items()}
    done = await bench.store.get(parent)
    last_child_end = await _last_child_end(bench, parent, n)
    # n, or the fan-in measured is not the one spawned (a replay that spawned anew)
    spawned = await bench.client.zcard(bench.store.keys("default").children(parent))
    baseline = await plain_runs(bench, n, tag)
    rep = {
        "load_before": load,
        "parent": done.status.value,
        "output": done.output,
        "children_spawned": spawned,
        "create": {
            "wall_s": round(measured["spawn_s"], 3),
            "ms_per_child": round(measured["spawn_s"] / n * 1000, 3),
            **cost(create, n),
        },
        "fan_in": {
            "wall_s": round(measured["joined_at"] - t0, 3),
            "last_child_end_to_resume_s": round(measured["resumed_at"] - last_child_end, 3),
            "replay_spawns_s": round(measured["replay_s"], 3),
            **cost(fan_in, n),
        },
        "plain_runs": baseline,
    }
    rep["fan_in"]["commands_per_child_beyond_plain"] = round(
        rep["fan_in"]["commands_per_child"] - baseline["commands_per_child"], 2
    )
    log(f"{tag}: create {rep['create']}, fan-in {rep['fan_in']}")
    return rep


async def plain_runs(bench: Bench, n: int, tag: str) -> dict[str, Any]:
    """The same number of plain ``demo.echo`` runs on the same worker: the baseline."""
    news = [NewRun(handler="demo.echo", input={"i": i}, queue=KIDS) for i in range(n)]
    ids = [c.run.id for c in await bench.store.create_many(news) if not isinstance(c, Exception)]
    before = await harness.counters(bench.client)
    t0 = time.time()
    env = bench.env(LEASEHOLD_QUEUES=f"default,{KIDS}")
    with harness.running(f"plain-{tag}", ["worker", "--queues", KIDS, "--concurrency", "50"], env):
        await until("the plain runs", lambda: _all_ended(bench, ids))
    delta = (await harness.counters(bench.client)).minus(before)
    return {"wall_s": round(time.time() - t0, 3), **cost(delta, n)}


async def _status_is(bench: Bench, run_id: str, status: RunStatus) -> bool:
    return (await bench.store.get(run_id)).status == status


async def _ended(bench: Bench, run_id: str) -> bool:
    return (await bench.store.get(run_id)).status.is_terminal


async def _all_ended(bench: Bench, ids: list[str]) -> bool:
    pipe = bench.client.pipeline(transaction=False)
    for run_id in ids:
        pipe.hget(bench.store.keys(KIDS).run(run_id), "status")
    return all(status in TERMINAL for status in await pipe.execute())


async def _last_child_end(bench: Bench, parent: str, n: int) -> float:
    """When the last child ended (epoch s), read from the children's records."""
    page = await TreeStore(bench.store.ctx).children_page(parent, limit=n)
    ends = [run.finished_at for run in page.items if run.finished_at is not None]
    return max(ends, default=datetime.now()).timestamp()


async def main(argv: list[str] | None = None) -> None:
    """Measure ``--reps`` repetitions and append the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m bench.children", description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    async with harness.private_redis("bench-children") as redis_server:
        settings = Settings(redis_url=redis_server.url)
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        result: dict[str, Any] = await harness.header(redis_server.client, args.label)
        result["children"] = [
            await fan_rep(bench, args.n, f"fan-{args.n}-{rep}") for rep in range(args.reps)
        ]
    path = harness.record(result)
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
