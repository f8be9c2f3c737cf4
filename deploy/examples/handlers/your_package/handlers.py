"""One handler, to show where yours go: ``LEASEHOLD_HANDLERS=your_package.handlers``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.executor import RunContext, handler


class Greeting(BaseModel):
    """Who to greet."""

    name: str = "world"


@handler("your_package.greet")
async def greet(ctx: RunContext, params: Greeting) -> dict[str, Any]:
    """Say hello, once: the greeting is a recorded effect, never repeated on a retry."""
    text = await ctx.effect("greet", lambda key: _say(f"hello, {params.name}"))
    return {"greeting": text}


async def _say(text: str) -> str:
    return text
