"""A fake streaming model, served by the API under /demo/model for ``demo.agent``.

It behaves like a reasoning model behind an HTTP API: it may think for a long
time before the first token, then streams tokens with a gap between them, and
can be told to stall forever after some tokens (a provider that hangs).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

router = APIRouter(tags=["demo"])

WORDS = [
    "the",
    "lease",
    "wakes",
    "someone",
    "up",
    "instead",
    "of",
    "killing;",
    "slow",
    "is",
    "not",
    "dead,",
    "and",
    "a",
    "budget",
    "is",
    "a",
    "policy,",
    "not",
    "a",
    "measurement.",
]


async def _tokens(
    first_token_s: float, gap_s: float, tokens: int, stall_after: int | None
) -> AsyncIterator[bytes]:
    await asyncio.sleep(first_token_s)
    for index in range(tokens):
        if stall_after is not None and index >= stall_after:
            await asyncio.Event().wait()  # the provider hangs: connection open, no bytes
        yield f"{WORDS[index % len(WORDS)]} \n".encode()
        await asyncio.sleep(gap_s)


@router.get("/demo/model", response_class=StreamingResponse, include_in_schema=False)
async def stream_model(
    first_token_s: Annotated[float, Query(ge=0, le=3600)] = 0.5,
    gap_s: Annotated[float, Query(ge=0, le=600)] = 0.05,
    tokens: Annotated[int, Query(ge=0, le=100_000)] = 40,
    stall_after: Annotated[int | None, Query(ge=0)] = None,
) -> StreamingResponse:
    """Stream ``tokens`` newline-separated tokens; see the module docstring."""
    return StreamingResponse(
        _tokens(first_token_s, gap_s, tokens, stall_after), media_type="text/plain"
    )
