"""A proxy between a worker and Redis that holds chosen messages: to open a race's window.

:class:`HoldingProxy` forwards like the chaos harness's proxy, and holds each chunk
that carries a marker (in one direction) until the test releases it, so a test can
put, say, a client's cancel between a claim's execution in Redis and its reply
reaching the worker, every time rather than once in a thousand runs.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from tools.chaos.proxy import BlackholeProxy

HOLD_MAX_S = 60.0  # a hold never released (a failed test) lets go after this


@dataclass(eq=False)
class Hold:
    """Chunks sent ``to_redis`` (else from it) that contain ``marker`` and not ``unless``."""

    to_redis: bool
    marker: bytes
    unless: bytes = b""
    seen: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, data: bytes, *, to_redis: bool) -> bool:
        """Whether this hold applies to ``data``, read in the direction ``to_redis``."""
        return (
            to_redis == self.to_redis
            and self.marker in data
            and not (self.unless and self.unless in data)
        )

    def release(self) -> None:
        """Forward what is held, and hold nothing more."""
        self.released.set()


class HoldingProxy(BlackholeProxy):
    """A :class:`BlackholeProxy` whose :meth:`hold` rules delay the chunks they match."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self._holds: list[Hold] = []

    def hold(self, *, to_redis: bool, marker: bytes, unless: bytes = b"") -> Hold:
        """Hold matching chunks from now until :meth:`Hold.release`."""
        rule = Hold(to_redis, marker, unless)
        self._holds.append(rule)
        return rule

    def watch(self, *, to_redis: bool, marker: bytes) -> threading.Event:
        """An event set once a chunk with ``marker`` is forwarded (nothing is held)."""
        rule = Hold(to_redis, marker)
        rule.release()
        self._holds.append(rule)
        return rule.seen

    async def _before_forward(self, data: bytes, *, to_redis: bool) -> None:
        for rule in list(self._holds):
            if not rule.matches(data, to_redis=to_redis):
                continue
            rule.seen.set()
            if not rule.released.is_set():
                await asyncio.to_thread(rule.released.wait, HOLD_MAX_S)
