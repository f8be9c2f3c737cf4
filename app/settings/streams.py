"""Event streams (SSE): keep-alives, dropping slow followers, and how many one API serves."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import WAIT_MAX_S, SettingsGroup


class StreamSettings(SettingsGroup):
    """Event streams and their followers."""

    sse_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="Keep-alive comment period on idle event streams",
    )
    sse_send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="A follower that cannot take a message this long is dropped",
    )
    sse_retry_ms: int = Field(
        default=2000, ge=0, description="Reconnect delay hinted to SSE clients (retry: field)"
    )
    sse_queue_max: int = Field(
        default=10_000,
        ge=10,
        description="Events a follower may lag behind before it is dropped (it resumes by id)",
    )
    sse_write_buffer_max_bytes: int = Field(
        default=1_048_576,
        ge=65_536,
        le=64 * 1024 * 1024,
        description="Unsent bytes a follower written to directly may have queued before it is "
        "dropped (it resumes by id); at least the socket's 64 KiB high-water mark",
    )
    sse_block_ms: int = Field(
        default=5000, ge=10, description="How long one XREAD of an event feed blocks per call"
    )
    sse_max_followed_runs: int = Field(
        default=1000,
        ge=1,
        description="Distinct runs one API process follows at once (keys of its one blocking "
        "XREAD); a follower of one more gets 503",
    )
    sse_max_followers: int = Field(
        default=1000,
        ge=1,
        description="SSE responses (run events and /activity) one API process serves at once; "
        "past it 503 with Retry-After",
    )
    sse_max_tree_streams: int = Field(
        default=100,
        ge=1,
        description="Tree streams (GET /runs/{id}/events?include=children) one API process "
        "serves at once, each also one of LEASEHOLD_SSE_MAX_FOLLOWERS; past it 503 with "
        "Retry-After. Each polls its runs on the API's own small tree pool",
    )
    tree_stream_max_runs: int = Field(
        default=200,
        ge=1,
        le=10_000,
        description="Runs one GET /runs/{id}/events?include=children follows (the run and its "
        "descendants, first found first); past it a tree_truncated event and no more",
    )
    activity_max_queues: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Queues one GET /activity may follow; more named gets 400, and without "
        "queue= it follows the first this many",
    )
    activity_max_followed_queues: int = Field(
        default=1000,
        ge=1,
        description="Distinct queues one API process follows at once over /activity; a "
        "request for more gets 503",
    )
