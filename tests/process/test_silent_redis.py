"""A Redis that accepts but stops answering makes requests 503, never hangs them.

``CLIENT PAUSE`` is the silent Redis: connections stay open and commands queue
up unanswered (as with a frozen node or a stalled fsync). The API's request
client bounds every reply by ``LEASEHOLD_REDIS_REQUEST_TIMEOUT_S`` and does not
resend a command that timed out, because Redis may still run it: a create
answered 503 during the pause is written when the pause ends, and retrying it
with its ``Idempotency-Key`` finds that one run instead of making a second.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.support.memory import SmallRedis
from tests.support.processes import Processes, base_env

PAUSE_MS = 8_000
ECHO = {"handler": "demo.echo", "input": {"message": "hi"}}


def test_a_paused_redis_is_a_503_and_a_created_run_is_found_by_its_key(
    small_redis: SmallRedis, prefix: str, tmp_path: Path
) -> None:
    procs = Processes(base_env(small_redis.url, prefix, lease_ttl_s=2.0), tmp_path)
    try:
        _, url = procs.api(LEASEHOLD_REDIS_REQUEST_TIMEOUT_S="1")
        with httpx.Client(base_url=url, timeout=60) as http:
            first = http.post("/runs", json=ECHO)
            assert first.status_code == 201, first.text
            with small_redis.client() as admin:
                # ends by itself: CLIENT UNPAUSE would be paused too
                admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
            paused_at = time.monotonic()
            read = http.get(f"/runs/{first.json()['id']}")
            keyed = http.post("/runs", json=ECHO, headers={"Idempotency-Key": "once"})
            answered_s = time.monotonic() - paused_at
            # answered while Redis was still silent, not when it spoke again
            assert answered_s < PAUSE_MS / 1000 * 0.75, answered_s
            for response in (read, keyed):
                assert response.status_code == 503, response.text
                assert response.headers["content-type"] == "application/problem+json"
                assert response.json()["type"].endswith("/store-unavailable")
                assert int(response.headers["retry-after"]) >= 1
            # the pause ends by itself; poll until Redis answers again
            deadline = time.monotonic() + 60
            while http.get("/healthz").status_code == 200 and time.monotonic() < deadline:
                if http.get("/runs", params={"limit": 1}).status_code == 200:
                    break
                time.sleep(0.2)

            # the queued create ran once the pause ended; its key finds that run
            again = http.post("/runs", json=ECHO, headers={"Idempotency-Key": "once"})
            assert again.status_code in (200, 201), again.text
            listing = http.get("/runs", params={"limit": 100}).json()["items"]
            keyed_runs = [run for run in listing if run["idempotency_key"] == "once"]
            assert [run["id"] for run in keyed_runs] == [again.json()["id"]]
            assert http.get(f"/runs/{first.json()['id']}").status_code == 200
    finally:
        procs.reap()
