"""Handlers the test kit's own tests run (app.testing): a day's sleep, a signal, a person."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.executor import RunContext, handler


class ReminderInput(BaseModel):
    """Whom to remind."""

    user: str


@handler("kit.reminder")
async def reminder(ctx: RunContext, params: ReminderInput) -> dict[str, Any]:
    """Sleep a day, then wait for the go signal, then ask a person; say what came."""
    await ctx.emit("note", {"phase": "start"})
    await ctx.sleep(86_400, name="day")
    go = await ctx.wait_for_signal("go")
    approved = await ctx.ask_human({"remind": params.user}, name="approve")
    sent = await ctx.effect("send", lambda key: {"sent_to": params.user, "key": key})
    return {"go": go, "approved": approved, "sent": sent["sent_to"]}


@handler("kit.patient")
async def patient(ctx: RunContext, params: ReminderInput) -> str:
    """Wait for a signal at most an hour."""
    try:
        await ctx.wait_for_signal("go", timeout_s=3600)
    except Exception as exc:  # SignalTimeout: the virtual hour passed
        return type(exc).__name__
    return "signalled"


# the steps of ``kit.steps`` (as LEASEHOLD_TEST_STEPS sets test.drift_steps's): a test sets
# them, records a run, then replays it against other steps (another build's code)
STEPS = ["e:a,w:go,e:b"]
CALLED: list[str] = []  # each effect function really called, by name


def steps_handler(steps: str) -> Any:
    """A handler taking ``steps`` in order: ``e:<name>`` an effect, ``w:<name>`` a signal
    wait, ``s:<message>`` a spawn of demo.echo, ``j:<any>`` a join of every child so far."""

    async def take(ctx: RunContext, params: ReminderInput) -> dict[str, Any]:
        done: list[Any] = []
        children: list[Any] = []
        for step in steps.split(","):
            kind, name = step.split(":", 1)
            if kind == "e":

                async def call(key: str, name: str = name) -> str:
                    CALLED.append(name)
                    return f"{name} done"

                done.append(await ctx.effect(name, call))
            elif kind == "w":
                done.append(await ctx.wait_for_signal(name))
            elif kind == "j":
                done.append(await ctx.join(children))
            else:
                children.append(await ctx.spawn("demo.echo", {"message": name}))
                done.append(children[-1].id)
        return {"done": done}

    return take


@handler("kit.steps")
async def kit_steps(ctx: RunContext, params: ReminderInput) -> dict[str, Any]:
    """The steps :data:`STEPS` lists now (a test changes them: a deploy)."""
    result: dict[str, Any] = await steps_handler(STEPS[0])(ctx, params)
    return result
