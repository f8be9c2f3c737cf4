"""A fake streaming model, served by the API under /demo/model for ``demo.agent``.

It behaves like a reasoning model behind an HTTP API: it may think for a long
time before the first token, then streams tokens with a gap between them, and
can be told to stall after some tokens (a provider that hangs).

It is mounted only where the demo is enabled (:func:`install`, called by
``leasehold api`` when LEASEHOLD_HANDLERS names app.demo), and every answer is
bounded: the first token within ``MAX_FIRST_TOKEN_S``, gaps within
``MAX_GAP_S``, and the whole answer — a stall included — ends after
``MAX_STREAM_S``, so no caller can hold a connection open for good.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import StreamingResponse

from app.demo.limits import MAX_FIRST_TOKEN_S, MAX_GAP_S, MAX_STREAM_S, MAX_TOKENS

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
    deadline = time.monotonic() + MAX_STREAM_S

    async def pause(seconds: float) -> bool:
        """Sleep, but never past the answer's deadline; False once it has passed."""
        remaining = deadline - time.monotonic()
        await asyncio.sleep(max(0.0, min(seconds, remaining)))
        return seconds < remaining

    if not await pause(first_token_s):
        return
    for index in range(tokens):
        if stall_after is not None and index >= stall_after:
            await pause(MAX_STREAM_S)  # the provider hangs: connection open, no bytes
            return
        yield f"{WORDS[index % len(WORDS)]} \n".encode()
        if not await pause(gap_s):
            return


@router.get("/demo/model", response_class=StreamingResponse, include_in_schema=False)
async def stream_model(
    first_token_s: Annotated[float, Query(ge=0, le=MAX_FIRST_TOKEN_S)] = 0.5,
    gap_s: Annotated[float, Query(ge=0, le=MAX_GAP_S)] = 0.05,
    tokens: Annotated[int, Query(ge=0, le=MAX_TOKENS)] = 40,
    stall_after: Annotated[int | None, Query(ge=0, le=MAX_TOKENS)] = None,
) -> StreamingResponse:
    """Stream ``tokens`` newline-separated tokens for at most MAX_STREAM_S; see the module."""
    return StreamingResponse(
        _tokens(first_token_s, gap_s, tokens, stall_after), media_type="text/plain"
    )


def install(app: FastAPI) -> None:
    """Serve /demo/model on ``app``: for an API whose LEASEHOLD_HANDLERS names the demo."""
    app.include_router(router)
