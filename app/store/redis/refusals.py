"""What a failed Redis call means: the one definition of "transient" every retry loop uses.

Redis refuses a call for a few reasons that pass on their own, and each needs a
different word for people:

* ``out_of_memory``: ``used_memory`` is past ``maxmemory`` under ``noeviction``;
  Redis refuses whatever may grow the data set until something frees memory.
* ``read_only``: the node is a replica now (``READONLY``: a failover demoted it;
  ``UNBLOCKED``: a blocking read it was serving was ended by that change), or
  its primary is down (``MASTERDOWN``).
* ``unavailable``: no answer (connection refused or dropped, timeout, loading
  its data set, a cluster mid-failover: ``CLUSTERDOWN``, ``TRYAGAIN``, no slot
  map), or no free connection in a bounded pool.

Anything else (a wrong argument, a bug in a script) is not transient: a retry
would fail the same way. :func:`refusal_of` tells them apart; every retry loop
(through :func:`is_transient` and the one policy in :mod:`app.retry`), the
heartbeat and the API's problem handlers ask it, so a new kind of refusal is
taught here once.
"""

from __future__ import annotations

from typing import Literal

from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

Refusal = Literal["out_of_memory", "read_only", "unavailable"]

# one line per refusal, for logs and problem details
EXPLANATIONS: dict[Refusal, str] = {
    "out_of_memory": "Redis is out of memory (used_memory past maxmemory)",
    "read_only": "Redis is read-only (a replica, or its primary is down)",
    "unavailable": "Redis cannot be reached",
}


def refusal_of(exc: BaseException) -> Refusal | None:
    """Why Redis refused or missed a call, when waiting may cure it; None when it will not.

    Order matters: ``MasterDownError`` is a ``ClusterDownError`` in redis-py, but
    it means the node has no writable primary, i.e. read-only.
    """
    if isinstance(exc, OutOfMemoryError):
        return "out_of_memory"
    if isinstance(exc, ReadOnlyError | MasterDownError) or _unblocked(exc):
        return "read_only"
    if isinstance(
        exc,
        RedisConnectionError
        | RedisTimeoutError
        | ClusterDownError
        | TryAgainError
        | RedisClusterException
        | OSError,
    ):
        return "unavailable"
    return None


def _unblocked(exc: BaseException) -> bool:
    """Redis ended a blocking read (XREAD BLOCK) because the node became a replica.

    redis-py has no class for this reply; it arrives as a plain ResponseError.
    """
    return isinstance(exc, ResponseError) and str(exc).startswith("UNBLOCKED")


def is_transient(exc: BaseException) -> bool:
    """A failure worth retrying with backoff: Redis may answer differently soon."""
    return refusal_of(exc) is not None


def describe(exc: BaseException) -> str:
    """The failure in words for a log line: the refusal's explanation, or "not transient"."""
    reason = refusal_of(exc)
    return EXPLANATIONS[reason] if reason else f"not transient: {type(exc).__name__}"
