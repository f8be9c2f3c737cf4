"""The floor of enqueue → start: what two processes pay to hand one value across Redis.

Issue 19's aim 5 asks for p50 ≤ 1 ms from a create to its run's start. Whatever the design,
a run crosses Redis from the producer's process to the worker's; this measures that floor
alone, with nothing of Leasehold in it (uvloop and hiredis, as the worker uses):

* ``blpop``  — the producer RPUSHes a timestamp, the other process is blocked in BLPOP
  (the shape of a direct hand-off: two process wake-ups);
* ``pubsub`` — the producer RPUSHes and PUBLISHes, the other process is woken by the message
  and pops with one EVALSHA (the shape of a wake + claim: four wake-ups).

Usage: ``.venv/bin/python -m bench.redis_floor PORT [blpop|pubsub ...]`` against a running
redis-server; 400 values at 50/s each, p50/p99 in ms.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
from multiprocessing.synchronize import Event

import redis.asyncio as aioredis
import uvloop

SAMPLES = 400
CLAIM = (
    "local v = redis.call('LPOP', KEYS[1]); "
    "if v then redis.call('HSET', KEYS[2], 'o', 'x') end; return v"
)


async def _receive(port: int, mode: str, ready: Event) -> None:
    """Collect SAMPLES values and print the delay of each from its timestamp."""
    client = aioredis.Redis(port=port)
    delays: list[float] = []
    if mode == "pubsub":
        pubsub = client.pubsub()
        await pubsub.subscribe("floor:wake")
        sha = await client.script_load(CLAIM)
        ready.set()
        while len(delays) < SAMPLES:
            message = await pubsub.parse_response(block=True)
            if message and message[0] == b"message":
                value = await client.evalsha(sha, 2, "floor:q", "floor:h")  # type: ignore[misc]
                if value:
                    delays.append(time.time() - float(value))
    else:
        ready.set()
        while len(delays) < SAMPLES:
            _, value = await client.blpop(["floor:inbox"], 0)  # type: ignore[misc]
            delays.append(time.time() - float(value))
    delays.sort()
    p50, p99 = delays[SAMPLES // 2] * 1e3, delays[int(SAMPLES * 0.99)] * 1e3
    print(f"{mode:7s} p50 {p50:.3f} ms  p99 {p99:.3f} ms  (n={SAMPLES})", flush=True)


def _receiver(port: int, mode: str, ready: Event) -> None:
    uvloop.run(_receive(port, mode, ready))


async def _send(port: int, mode: str) -> None:
    """Send SAMPLES timestamps at 50/s, the rate of the aim."""
    client = aioredis.Redis(port=port)
    for _ in range(SAMPLES):
        if mode == "pubsub":
            pipe = client.pipeline(transaction=False)
            pipe.rpush("floor:q", repr(time.time()))
            pipe.publish("floor:wake", "1")
            await pipe.execute()
        else:
            await client.rpush("floor:inbox", repr(time.time()))  # type: ignore[misc]
        await asyncio.sleep(0.02)


def main() -> None:
    """Measure each mode named on the command line, one after the other."""
    port = int(sys.argv[1])
    for mode in sys.argv[2:] or ["blpop", "pubsub"]:
        ready = multiprocessing.Event()
        receiver = multiprocessing.Process(target=_receiver, args=(port, mode, ready))
        receiver.start()
        ready.wait()
        time.sleep(0.3)
        uvloop.run(_send(port, mode))
        receiver.join()


if __name__ == "__main__":
    main()
