"""``demo.agent``: a simulated agent turn, to watch the whole supervision ladder.

Each step streams a "model" answer over HTTP from the API's fake model
(/demo/model), emitting every chunk as a ``token`` event, then calls "tools"
that take a while or hang forever. Each is a supervised operation: when it
outlives its lease a ``wait`` event goes out and the watchdog's ``verdict``
follows; budgets (first progress, idle, duration) end it with typed errors.

The model is always the API's own route, at LEASEHOLD_API_URL (this host's API
when unset): the input names no URL, so no client can point the worker — and
the API key it sends — at a host of its choosing (server-side request forgery).
Redirects are not followed, for the same reason.

No hidden deadline under the lease: the model client uses httpx with a connect
timeout and *no* read or total timeout, so a model that thinks for ten minutes
is limited by ``first_progress_s`` (a budget, with its own error) and watched by
the operation lease, never cut by a transport timeout that nobody chose.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from app.demo.limits import (
    MAX_FIRST_TOKEN_S,
    MAX_GAP_S,
    MAX_TOKENS,
    MAX_TOOL_LATENCY_S,
    MAX_TOOLS_PER_STEP,
)
from app.executor import Operation, RunContext, handler
from app.settings import load_settings

if TYPE_CHECKING:
    import httpx

# connect and write are bounded; reading a stream is not (the lease watches it)
MODEL_CONNECT_TIMEOUT_S = 5.0


class ModelScript(BaseModel):
    """How the fake model behaves (within the bounds its route enforces)."""

    model_config = ConfigDict(extra="forbid")

    first_token_s: float = Field(default=0.5, ge=0, le=MAX_FIRST_TOKEN_S)
    gap_s: float = Field(default=0.05, ge=0, le=MAX_GAP_S)
    tokens: int = Field(default=40, ge=0, le=MAX_TOKENS)
    stall_after: int | None = Field(
        default=None, ge=0, le=MAX_TOKENS, description="hang after N tokens"
    )


class ToolScript(BaseModel):
    """A fake tool call."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="crm.search", max_length=64)
    latency_s: float = Field(default=0.5, ge=0, le=MAX_TOOL_LATENCY_S)
    hang: bool = False
    progress_every_s: float | None = Field(default=None, gt=0)


class AgentInput(BaseModel):
    """One or more agent steps: a model call, then tool calls. Names no URL: see the module."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=1, ge=1, le=100)
    model: ModelScript = Field(default_factory=ModelScript)
    tools: list[ToolScript] = Field(
        default_factory=lambda: [ToolScript()], max_length=MAX_TOOLS_PER_STEP
    )
    model_lease_s: float = Field(default=2.0, gt=0)
    tool_lease_s: float = Field(default=1.0, gt=0)
    first_progress_s: float | None = Field(default=None, gt=0)
    idle_s: float | None = Field(default=None, gt=0)
    max_duration_s: float | None = Field(default=None, gt=0)


@handler("demo.agent")
async def agent(ctx: RunContext, params: AgentInput) -> dict[str, Any]:
    """Run ``steps`` turns of model streaming and tool calls under supervision."""
    settings = load_settings()
    # from this worker's settings only: the key below goes nowhere a client chose
    url = f"{settings.client_api_url}/demo/model"
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    transcript: list[str] = []
    # imported here: every worker loads the demo handlers, few run this one
    from app.httpx_import import httpx

    bounded = MODEL_CONNECT_TIMEOUT_S
    timeout = httpx.Timeout(connect=bounded, read=None, write=bounded, pool=bounded)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, follow_redirects=False) as http:
        for _ in range(params.steps):
            await ctx.step()
            for note in ctx.take_nudges():
                await ctx.emit("note", {"nudge": note})
            transcript.append(await _model_call(ctx, http, url, params))
            for tool in params.tools:
                await ctx.supervise(
                    "tool_call", tool.name, _tool(tool), lease_s=params.tool_lease_s
                )
    return {"steps": params.steps, "answer": " ".join(transcript).strip()}


async def _model_call(
    ctx: RunContext, http: httpx.AsyncClient, url: str, params: AgentInput
) -> str:
    chunks: list[str] = []
    query = params.model.model_dump(exclude_none=True)
    async with (
        ctx.operation(
            "model_call",
            "planner",
            lease_s=params.model_lease_s,
            first_progress_s=params.first_progress_s,
            idle_s=params.idle_s,
            max_duration_s=params.max_duration_s,
        ) as op,
        http.stream("GET", url, params=query) as response,
    ):
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line:
                op.progress(tokens=1)
                # a token arrives with its trailing space (for the inline stream); the answer
                # joins words with one space, so it must not keep that space too
                chunks.append(line.strip())
                await ctx.emit("token", {"text": line})
    return " ".join(chunk for chunk in chunks if chunk)


def _tool(tool: ToolScript) -> Any:
    async def call(op: Operation) -> dict[str, Any]:
        if tool.hang:
            await asyncio.Event().wait()  # a third-party API that never answers
        remaining = tool.latency_s
        while remaining > 0:
            step = min(remaining, tool.progress_every_s or remaining)
            await asyncio.sleep(step)
            remaining -= step
            op.progress(waited_s=tool.latency_s - remaining)
        return {"tool": tool.name, "latency_s": tool.latency_s}

    return call
