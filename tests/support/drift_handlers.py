"""A handler whose steps are set by its worker's environment: a deploy in a test.

``LEASEHOLD_TEST_STEPS`` (read at each call, so a worker started with another value
runs "another build"; a run's input ``steps`` overrides it) lists the steps in order:
``e:<name>`` an effect, ``w:<name>`` a signal wait, ``z:<seconds>`` a durable sleep,
``h:<question>`` a question for a person, ``s:<message>`` a spawn of ``demo.echo``,
``j:<any>`` a join of every child spawned so far; an effect named ``slow...`` takes a
minute (a worker can be killed inside it) and is idempotent. Each effect call is
recorded in Redis (:func:`effect_calls_key`), so a test sees which side effects really ran.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from app.executor import RunContext, handler
from app.store.redis.connection import async_client

DEFAULT_STEPS = "e:a,w:go,e:b"


def effect_calls_key(prefix: str, run_id: str) -> str:
    """Where ``test.drift_steps`` records each effect it really called: its name."""
    return f"{prefix}:test:effect-calls:{run_id}"


class StepsInput(BaseModel):
    """The steps, when a run names its own (a rolling deploy's mix of waits); else the
    worker's environment's."""

    steps: str | None = None


@handler("test.drift_steps")
async def steps(ctx: RunContext, params: StepsInput) -> dict[str, Any]:
    """Take the steps LEASEHOLD_TEST_STEPS lists, in order; return what each gave."""
    done: list[Any] = []
    children: list[str] = []
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    calls = effect_calls_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id)
    try:
        steps = params.steps or os.environ.get("LEASEHOLD_TEST_STEPS", DEFAULT_STEPS)
        for step in steps.split(","):
            kind, name = step.split(":", 1)
            if kind == "e":

                async def call(key: str, name: str = name) -> str:
                    await client.rpush(calls, name)
                    if name.startswith("slow"):
                        await asyncio.sleep(60)
                    return f"{name} done ({key})"

                # a slow one is idempotent: its owner's death leaves it to be called again,
                # not a run parked for a person (what the reconciler does otherwise)
                slow = name.startswith("slow")
                done.append(await ctx.effect(name, call, idempotent=slow))
            elif kind == "w":
                done.append(await ctx.wait_for_signal(name))
            elif kind == "z":
                await ctx.sleep(float(name))
                done.append(f"slept {name}")
            elif kind == "h":
                done.append(await ctx.ask_human({"question": name}))
            elif kind == "j":
                done.append(await ctx.join(children))
            else:
                children.append((await ctx.spawn("demo.echo", {"message": name})).id)
                done.append(children[-1])
    finally:
        await client.aclose()
    return {"done": done}


@handler("test.patched_steps")
async def patched_steps(ctx: RunContext, params: StepsInput) -> dict[str, Any]:
    """Effects a and b around a signal wait; the code with LEASEHOLD_TEST_PATCHED=1 swaps
    the effects behind ``ctx.patched("swap")``, as a deploy would guard the change."""
    new_code = os.environ.get("LEASEHOLD_TEST_PATCHED") == "1"
    swapped = new_code and await ctx.patched("swap")
    order = "e:b,w:go,e:a" if swapped else "e:a,w:go,e:b"
    client = async_client(os.environ["LEASEHOLD_REDIS_URL"])
    calls = effect_calls_key(os.environ["LEASEHOLD_PREFIX"], ctx.run_id)
    done: list[Any] = []
    try:
        for step in order.split(","):
            kind, name = step.split(":", 1)
            if kind == "w":
                done.append(await ctx.wait_for_signal(name))
                continue

            async def call(key: str, name: str = name) -> str:
                await client.rpush(calls, name)
                return f"{name} done"

            done.append(await ctx.effect(name, call))
    finally:
        await client.aclose()
    return {"done": done, "swapped": swapped}
