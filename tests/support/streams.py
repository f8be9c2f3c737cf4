"""Run event streams written straight into Redis: what a feed reads, without a worker."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from app.store.runs.new import NewRun
from app.store.runs.store import RunStore


async def new_run(run_store: RunStore) -> tuple[str, str]:
    """A queued run (its stream holds ``created``); its id and its stream's key."""
    run_id = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    return run_id, run_store.keys("default").events(run_id)


async def append(
    client: aioredis.Redis, key: str, indexes: range, *, maxlen: int | None = None
) -> None:
    """Append token entries in one MULTI, trimming exactly to ``maxlen`` on each."""
    pipe = client.pipeline(transaction=True)
    for i in indexes:
        fields = {"type": "token", "ts": 0, "fence": 1, "data": json.dumps({"i": i})}
        pipe.xadd(key, fields, maxlen=maxlen, approximate=False)
    await pipe.execute()
