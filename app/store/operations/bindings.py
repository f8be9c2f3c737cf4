"""Typed bindings of ``scripts/lua/operations/``: each script's KEYS, ARGV record and reply.

Each is a :class:`~app.store.lua.transition.Transition` (see there for what a binding
holds); this room's store is the only code that sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.store.keys import GlobalKeys, QueueKeys
from app.store.lua.transition import (
    Transition,
)


class CommitOperationArgs(NamedTuple):
    """ARGV of ``commit_operation``: one step's progress of a bulk operation."""

    operation_id: str
    driver: str
    lease_ms: int
    retention_ms: int
    fields: str  # JSON object: strings and finite numbers
    force: int  # 1: whoever drives it (a cancel)


class CommitOperationReply(NamedTuple):
    """OK, NOT_FOUND, INVALID (``detail``: its status) or CONFLICT (``detail``: the driver)."""

    code: str
    detail: str


def _commit_operation_keys(k: QueueKeys, run_id: str, a: CommitOperationArgs) -> tuple[str, ...]:
    # an operation spans queues: its one key is a global one, built from the prefix alone
    return (GlobalKeys(k.prefix).operation(a.operation_id),)


def _commit_operation_reply(reply: Sequence[Any]) -> CommitOperationReply:
    return CommitOperationReply._make(reply)


COMMIT_OPERATION: Transition[CommitOperationArgs, CommitOperationReply] = Transition(
    "commit_operation", _commit_operation_keys, CommitOperationArgs, _commit_operation_reply
)
