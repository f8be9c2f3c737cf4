"""Typed bindings of ``scripts/lua/ratelimits/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.scripts import ScriptCode
from app.store.lua.transition import (
    DeclareReply,
    Transition,
    _declare_reply,
)


class TakeArgs(NamedTuple):
    """ARGV of ``take_tokens``."""

    limit: int
    period_ms: int
    burst: int
    cost: int
    max_wait_ms: int


class TakeReply(NamedTuple):
    """``take_tokens``' answer: taken (OK) or not (LIMITED), by the Redis clock."""

    granted: bool
    wait_ms: int
    now_ms: int
    remaining: int


def _bucket_keys(k: QueueKeys, bucket_key: str, a: object) -> tuple[str, ...]:
    return (bucket_key,)


def _take_reply(reply: Sequence[Any]) -> TakeReply:
    code, wait_ms, now_ms, remaining = reply
    return TakeReply(code == ScriptCode.OK, int(wait_ms), int(now_ms), int(remaining))


TAKE_TOKENS: Transition[TakeArgs, TakeReply] = Transition(
    "take_tokens", _bucket_keys, TakeArgs, _take_reply
)


class PushArgs(NamedTuple):
    """ARGV of ``push_bucket``."""

    limit: int
    period_ms: int
    burst: int
    retry_after_ms: int


class PushReply(NamedTuple):
    """``push_bucket``'s answer: when a token passes again, and now (both Redis clock, ms)."""

    until_ms: int
    now_ms: int


def _push_reply(reply: Sequence[Any]) -> PushReply:
    _code, until_ms, now_ms = reply
    return PushReply(int(until_ms), int(now_ms))


PUSH_BUCKET: Transition[PushArgs, PushReply] = Transition(
    "push_bucket", _bucket_keys, PushArgs, _push_reply
)


class DeclareRateLimitArgs(NamedTuple):
    """ARGV of ``declare_rate_limit``."""

    name: str
    spec: str
    max_keys: int


def _declarations_keys(k: QueueKeys, subject: str, a: object) -> tuple[str, ...]:
    return (GlobalKeys(k.prefix).rate_limits,)


DECLARE_RATE_LIMIT: Transition[DeclareRateLimitArgs, DeclareReply] = Transition(
    "declare_rate_limit", _declarations_keys, DeclareRateLimitArgs, _declare_reply
)
