"""The hand-off fault under another lane's Redis fault: Redis refusing is no crash.

With ``--lanes 2`` (the soak's default) a ``kill_idle_worker`` may run while the
other lane has Redis stopped (``restart_redis``, ``redis_outage``). Every read it
makes of Redis then fails; the fault must still kill and replace its worker and
record the rows it could read, not end the whole soak with a ConnectionError
(soak seed 21, 120 s, on 63b4a75).
"""

from __future__ import annotations

import json
import random
import signal
from types import SimpleNamespace
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tools.chaos import faults
from tools.chaos.faults import FaultKind, Injector

OWNER = "w-dead"


class FlakyRedis:
    """Answers like Redis except for the commands numbered in ``down`` (a refused connection)."""

    def __init__(
        self, down: range, *, registered: bool = False, inbox: tuple[str, ...] = ()
    ) -> None:
        self.down = down
        self.registered = registered
        self.inbox = inbox
        self.now_ms = 1_000_000
        self.calls = 0
        self.failed = 0

    def _check(self) -> None:
        self.calls += 1
        if self.calls in self.down:
            self.failed += 1
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connect call failed")

    async def time(self) -> tuple[int, int]:
        self._check()
        return self.now_ms // 1000, (self.now_ms % 1000) * 1000

    async def zrangebyscore(self, key: str, low: float, high: str) -> list[str]:
        self._check()
        return [OWNER] if self.registered else []

    async def zscore(self, key: str, member: str) -> float | None:
        self._check()
        return float(self.now_ms + 10_000) if self.registered else None

    async def zrange(self, key: str, start: int, stop: int) -> list[str]:
        self._check()
        return []

    async def lrange(self, key: str, start: int, stop: int) -> list[str]:
        self._check()
        return list(self.inbox)

    def pipeline(self, transaction: bool) -> Any:
        return SimpleNamespace(execute=self._execute)

    async def _execute(self) -> list[str]:
        self._check()
        return []


def _injector(redis_client: FlakyRedis) -> tuple[Injector, Any, list[str]]:
    """An injector over one stand-in worker slot; ``events`` logs what it did to it."""
    events: list[str] = []
    process = SimpleNamespace(
        alive=lambda: True,
        owner_id=OWNER,
        pid=4242,
        name="worker0-0",
        signal=lambda sig: events.append(signal.Signals(sig).name),
        popen=SimpleNamespace(wait=lambda timeout: events.append("waited") or -9),
    )
    slot = SimpleNamespace(index=0, current=process)
    cluster: Any = SimpleNamespace(
        config=SimpleNamespace(lease_ttl_s=0.2),
        prefix="t",
        workers=[slot],
        apis=[],
        start_worker=lambda s: events.append("started"),
    )
    injector = Injector(cluster, redis_client, random.Random(1))  # type: ignore[arg-type]

    async def burst(n: int) -> None:
        events.append(f"burst{n}")

    injector.create_burst = burst
    return injector, slot, events


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "HANDOFF_SEARCH_S", 0.2)
    monkeypatch.setattr(faults, "HANDOFF_POLL_S", 0.01)


async def test_kill_idle_worker_while_redis_is_down_kills_and_replaces() -> None:
    redis_client = FlakyRedis(range(1, 10**9))
    injector, _, events = _injector(redis_client)
    fault = await injector.inject(FaultKind.KILL_IDLE_WORKER)
    assert events[0] == "SIGKILL" and events[-1] == "started"
    assert fault.details["registered"] is False  # none found: the busiest slot instead
    assert fault.details["handed"] == []
    assert fault.owner_id == OWNER and fault.ended_ms >= fault.started_ms
    assert redis_client.failed > 2  # it looked again while Redis was down
    assert injector._held == set()


async def test_kill_idle_worker_reads_the_inbox_once_redis_is_back() -> None:
    # found registered (calls 1-3), then Redis stops for the bursts and the wait and
    # comes back before the registration is known to lapse
    redis_client = FlakyRedis(range(4, 40), registered=True, inbox=(json.dumps(["run-1", 7]),))
    injector, _, events = _injector(redis_client)
    fault = await injector.inject(FaultKind.KILL_IDLE_WORKER)
    assert fault.details["registered"] is True
    assert fault.details["handed"] == ["run-1@7"]
    assert events[0] == "SIGKILL" and events[-1] == "started"
    assert redis_client.failed > 20  # the wait and the first inbox reads met Redis down
