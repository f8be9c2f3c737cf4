"""The lease-bound capability token with real processes: a zombie's calls are refused.

A worker runs a (sync, uninterruptible) handler that calls a tool through
``leasehold gate`` every 100 ms with ``ctx.lease_token``. The worker is SIGSTOPped; a
second worker takes the run over once the lease expires; the first is SIGCONTed. From
then on its calls through the gate are refused (409, stale fence) within one lease TTL,
while the new owner's pass: the tool itself records who got through.

The gate runs with a wide clock leeway (``--leeway-s 60``), so expiry cannot be what
refuses the zombie: only the online fence check can.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import redis.asyncio as aioredis

from app.models import RunStatus
from app.stack.embedded import free_port
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.handlers import gate_calls_key
from tests.support.polling import eventually
from tests.support.processes import Processes

KEY = "k-gate-test-0123456789abcdef"
LEASE_TTL_S = 2.0


class Tool:
    """The upstream: answers 200 and records (time, owner, fence) of every caller."""

    def __init__(self) -> None:
        self.passed: list[tuple[float, str, int]] = []
        tool = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the gate's pooled client expects

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                tool.passed.append(
                    (
                        time.time(),
                        self.headers["leasehold-owner"],
                        int(self.headers["leasehold-fence"]),
                    )
                )
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def tool() -> Iterator[Tool]:
    upstream = Tool()
    thread = threading.Thread(target=upstream.server.serve_forever, daemon=True)
    thread.start()
    yield upstream
    upstream.server.shutdown()
    upstream.server.server_close()


async def calls(
    redis_client: aioredis.Redis, prefix: str, run_id: str
) -> list[tuple[float, str, int, int]]:
    rows = await redis_client.lrange(gate_calls_key(prefix, run_id), 0, -1)
    parsed = [row.split() for row in rows]
    return [(float(t), owner, int(fence), int(status)) for t, owner, fence, status in parsed]


def wait_listening(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.post(url, timeout=1).status_code == 401:  # no token: refused, so up
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the gate at {url} never answered")


@pytest.mark.slow
async def test_a_paused_owner_is_refused_by_the_gate_once_taken_over(
    processes: Processes,
    run_store: RunStore,
    redis_client: aioredis.Redis,
    prefix: str,
    tool: Tool,
) -> None:
    processes.env.update(
        LEASEHOLD_LEASE_TTL_S=str(LEASE_TTL_S), LEASEHOLD_API_KEYS=KEY, LEASEHOLD_API_KEY=KEY
    )
    _, api_url = processes.api()
    port = free_port()
    gate_url = f"http://127.0.0.1:{port}"
    args = ["gate", "--upstream", tool.url, "--listen", str(port), "--api", api_url]
    processes.spawn("gate", [*args, "--audience", "tools", "--leeway-s", "60"])
    await asyncio.to_thread(wait_listening, gate_url + "/call")

    first = processes.worker()
    new = NewRun(
        handler="test.gated_calls",
        input={"gate_url": gate_url + "/call", "seconds": 25},
        on_lease_expired="retry",
        max_attempts=2,
    )
    run_id = (await run_store.create(new)).run.id
    await eventually(lambda: asyncio.sleep(0, tool.passed), until=len, what="a first pass")
    zombie = (await run_store.get(run_id)).owner_id
    first.signal(signal.SIGSTOP)

    processes.worker()
    taken = await eventually(
        lambda: run_store.get(run_id),
        until=lambda run: run.owner_id not in (None, zombie) and run.status == RunStatus.RUNNING,
        timeout_s=60,
        what="a takeover",
    )
    await eventually(
        lambda: asyncio.sleep(0, [p for p in tool.passed if p[2] == taken.fence]),
        until=len,
        what="the new owner's calls passing",
    )
    resumed_at = time.time()
    first.signal(signal.SIGCONT)
    await asyncio.sleep(3 * LEASE_TTL_S)

    zombie_calls = [c for c in await calls(redis_client, prefix, run_id) if c[1] == zombie]
    after = [c for c in zombie_calls if c[0] > resumed_at]
    assert after, "the zombie kept calling after it woke"
    late = [c for c in after if c[0] > resumed_at + LEASE_TTL_S]
    assert late and all(status == 409 for *_, status in late), after
    # the tool saw nothing of the zombie once it woke (not even within the TTL: the gate's
    # answer from before the pause was long stale)
    assert not [p for p in tool.passed if p[1] == zombie and p[0] > resumed_at], tool.passed
    owner_calls = [c for c in await calls(redis_client, prefix, run_id) if c[2] == taken.fence]
    assert owner_calls and {status for *_, status in owner_calls[-5:]} == {200}
