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
