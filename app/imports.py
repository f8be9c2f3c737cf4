"""Importing a library without an optional module it loads but Leasehold never uses.

Some libraries import an optional module at their top whether or not it will be used:
httpx its command-line client (click, rich, pygments: ~35 ms of every CLI command),
redis-py OpenTelemetry's metrics API and, where the SDK is installed, the SDK's
metrics (~5 ms and ~45 ms of a worker's start-up, BENCHMARKS.md "Worker start-up").
Each falls back to a stub when the import fails, and Leasehold never calls the part
that needs it, so the import that would load it is made to fail, once, inside
:func:`absent`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast


@contextmanager
def absent(*modules: str) -> Iterator[None]:
    """Imports inside the block find ``modules`` not installed; later imports find them.

    A ``None`` in ``sys.modules`` is how Python says "no such module"; it is taken out
    again on leaving, so a later ``import`` of the module works as usual. A module
    already imported is left as it is: a library imported after it sees it as always.
    """
    table = cast(dict[str, Any], sys.modules)
    hidden = [name for name in modules if name not in table]
    for name in hidden:
        table[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if name in table and table[name] is None:
                del table[name]


# what redis-py's observability imports at its top to record OpenTelemetry metrics of
# its own, off unless a program calls ``redis.observability``'s init (Leasehold never
# does: its metrics are Prometheus', its traces its own spans); redis-py records none
# when they are missing
REDIS_UNUSED = ("opentelemetry.metrics", "opentelemetry.sdk.metrics")


def import_redis() -> None:
    """Import redis-py without its OpenTelemetry metrics: ~5-45 ms of a worker's start.

    Call it before anything in the process imports ``redis`` (a later call changes
    nothing): the worker's entry does, first thing. ~5 ms is the metrics API (in the
    image's lock), ~45 ms more the SDK's metrics where the SDK is installed (``make
    install``, the ``otel`` extra), both on a quiet core. A handler that uses
    OpenTelemetry metrics itself imports them as usual.
    """
    with absent(*REDIS_UNUSED):
        import redis  # noqa: F401
