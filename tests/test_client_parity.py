"""Client and AsyncClient send the same requests and read the same answers.

Both send one request spec per API method (``app/client/calls.py``); this test drives
every method of both against one recording transport and fails when they drift:
a method one has and the other lacks, or a different method, path, query or
body for the same call.
"""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime
from typing import Any

import httpx

from app.client import AsyncClient, Client
from app.models.read import QueueLimits, RateLimitSpec

RUN_ID = "default.01M8NMVX0F2FBPYNB2A04QJM1Z"
RUN = {
    "id": RUN_ID,
    "queue": "default",
    "handler": "demo.echo",
    "status": "queued",
    "created_at": "2026-01-01T00:00:00Z",
}
WORKER = {
    "id": "w-1-abc",
    "host": "h",
    "pid": 1,
    "queues": ["default"],
    "concurrency": 4,
    "running": 0,
    "loop_lag_ms": 0.0,
    "started_at": "2026-01-01T00:00:00Z",
    "last_heartbeat_at": "2026-01-01T00:00:01Z",
}
QUEUE = {
    "name": "default",
    "configured": True,
    "ready": 1,
    "running": 0,
    "delayed": 0,
    "parked": 0,
    "oldest_queued_age_s": 0.5,
    "memory_bytes": 1024,
}
OP_ID = "01M8NMVX0F2FBPYNB2A04QJM1Z"
OPERATION = {
    "id": OP_ID,
    "status": "running",
    "filter": {"handler": "demo.echo"},
    "limit": 10,
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:01Z",
}
LIMITS = {"queue": 4, "handlers": {"demo.echo": 2}, "default_key": 1, "keys": {"vip": 3}}
RATE_LIMIT = {"key": "crm:{tenant}", "template": True, "spec": {"limit": 5}}
SCHEDULE = {
    "id": "nightly",
    "queue": "default",
    "cron": "30 2 * * *",
    "overlap": "skip",
    "missed": "skip",
    "catchup_window_s": 86400.0,
    "paused": False,
    "version": 1,
    "run": {"handler": "demo.echo"},
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
}
FIRED = {"created": [RUN_ID], "skipped": 0, "buffered": False, "cancelled": []}
KEY_ID = "k0123456789abcdef"
KEY_INFO = {"id": KEY_ID, "name": "ci", "role": "read", "created_at": "2026-01-01T00:00:00Z"}
KEY_SECRET = {**KEY_INFO, "secret": "lh_" + "s" * 43}
BUILD = {
    "build_id": "b-1",
    "workers": ["w-1-abc"],
    "draining_workers": 0,
    "running_now": 1,
    "pinned": {"queued": 0, "running": 1, "parked": 2},
    "unavailable": 0,
    "drained": False,
}
ANSWERS: dict[str, Any] = {
    "/schedules": SCHEDULE,
    "/schedules/nightly": SCHEDULE,
    "/schedules/nightly/pause": SCHEDULE,
    "/schedules/nightly/resume": SCHEDULE,
    "/schedules/nightly/trigger": FIRED,
    "/schedules/nightly/backfill": FIRED,
    "/queues": {"items": [QUEUE], "max_queues": 100},
    "/queues/default": QUEUE,
    "/runs": RUN,
    f"/runs/{RUN_ID}": RUN,
    f"/runs/{RUN_ID}/cancel": {"id": RUN_ID, "status": "cancelled"},
    f"/runs/{RUN_ID}/resume": {"id": RUN_ID, "status": "queued"},
    f"/runs/{RUN_ID}/signals/go": {"id": RUN_ID, "name": "go", "outcome": "buffered"},
    f"/runs/{RUN_ID}/resolve": RUN,
    f"/runs/{RUN_ID}/retry": RUN,
    "/runs/retry": OPERATION,
    f"/operations/{OP_ID}": OPERATION,
    f"/operations/{OP_ID}/resume": OPERATION,
    f"/operations/{OP_ID}/cancel": OPERATION,
    "/handlers": [{"name": "demo.echo", "input_schema": {"type": "object"}}],
    "/workers": [WORKER],
    "/builds": [BUILD],
    "/builds/b-1": BUILD,
    "/builds/b-1/upgrade": {"build_id": "b-1", "upgraded": 2, "remaining": 0},
    f"/runs/{RUN_ID}/upgrade": RUN,
    "/runs/batch": {"items": [{"status": 201, "run": RUN}]},
    "/runs/purge": {"deleted": 1, "ids": [RUN_ID], "next_cursor": None, "done": True},
    "/queues/default/series": {"queue": "default", "bucket_s": 60, "buckets": []},
    "/workers/w-1-abc/drain": {"id": "w-1-abc", "drain_requested": True},
    "/queues/default/limits": LIMITS,
    "/rate-limits": {"items": [RATE_LIMIT], "max_rate_limits": 1000},
    "/rate-limits/crm:{tenant}": RATE_LIMIT,
    f"/runs/{RUN_ID}/children": {"items": [RUN], "next_cursor": None},
    f"/runs/{RUN_ID}/history": {
        "version": 1,
        "run": {
            "id": RUN_ID,
            "queue": "default",
            "handler": "demo.echo",
            "status": "queued",
            "attempt": 1,
        },
        "steps": ["e|a:1"],
        "events_truncated": True,
    },
    "/keys": KEY_SECRET,
    f"/keys/{KEY_ID}/rotate": KEY_SECRET,
    "/audit": {"items": [], "next_cursor": None},
    "/namespaces": {"items": [{"name": "default", "quotas": {}}]},
    "/namespaces/acme": {"name": "acme", "quotas": {"live_runs": 3}},
    f"/runs/{RUN_ID}/stream-token": {"token": "a.b.c", "expires_at": "2026-01-01T00:00:00Z"},
    f"/leases/{RUN_ID}": {
        "run_id": RUN_ID,
        "queue": "default",
        "status": "running",
        "owner_id": "w-1-abc",
        "fence": 2,
        "held": True,
        "expires_at_ms": 1_700_000_030_000,
        "now_ms": 1_700_000_000_000,
    },
}
# (method, args, kwargs): every request-response method of the clients
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("create", ("demo.echo", {"a": 1}), {"queue": "default", "max_attempts": None}),
    ("get", (RUN_ID,), {}),
    ("list_runs", (), {"status": "queued", "limit": 5, "cursor": None}),
    ("cancel", (RUN_ID,), {}),
    ("delete", (RUN_ID,), {}),
    (
        "purge",
        (),
        {"status": "succeeded", "finished_before": datetime(2026, 1, 1, tzinfo=UTC)},
    ),
    ("resume", (RUN_ID, {"answer": "yes"}), {}),
    ("resolve", (RUN_ID, "succeed"), {"output": {"ok": True}, "note": None}),
    ("retry", (RUN_ID,), {"checkpoint": "drop", "idempotency_key": None}),
    (
        "retry_many",
        (),
        {"handler": "demo.echo", "finished_after": datetime(2026, 1, 1, tzinfo=UTC), "limit": None},
    ),
    ("operation", (OP_ID,), {}),
    ("resume_operation", (OP_ID,), {}),
    ("cancel_operation", (OP_ID,), {}),
    ("signal", (RUN_ID, "go", {"ok": 1}), {}),
    ("limits", ("default",), {}),
    ("set_limits", ("default", QueueLimits(**LIMITS)), {}),
    ("set_priority", (RUN_ID, 7), {}),
    ("rate_limits", (), {}),
    ("rate_limit", ("crm:{tenant}",), {}),
    ("declare_rate_limit", ("crm:{tenant}", RateLimitSpec(limit=5, period_s=2.0)), {}),
    ("undeclare_rate_limit", ("crm:{tenant}",), {}),
    ("children", (RUN_ID,), {"limit": 10}),
    ("history", (RUN_ID,), {"max_events": 5}),
    ("stream_token", (RUN_ID,), {"tree": True}),
    ("lease", (RUN_ID,), {}),
    ("create_schedule", ("nightly", {"handler": "demo.echo"}), {"cron": "30 2 * * *"}),
    ("get_schedule", ("nightly",), {}),
    ("list_schedules", (), {"limit": 10}),
    ("update_schedule", ("nightly",), {"overlap": "allow", "missed": None}),
    ("pause_schedule", ("nightly",), {}),
    ("resume_schedule", ("nightly",), {}),
    ("trigger_schedule", ("nightly",), {"overlap": "skip"}),
    (
        "backfill_schedule",
        ("nightly", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)),
        {},
    ),
    ("delete_schedule", ("nightly",), {}),
    ("create_key", ("ci", "read"), {"expires_in_s": 60}),
    ("keys", (), {}),
    ("rotate_key", (KEY_ID,), {"grace_s": 5}),
    ("revoke_key", (KEY_ID,), {}),
    ("audit", (), {"limit": 10, "before": None}),
    ("namespaces", (), {}),
    ("put_namespace", ("acme",), {"live_runs": 3}),
    ("namespace", ("acme",), {}),
    ("delete_namespace", ("acme",), {}),
    ("builds", (), {}),
    ("build", ("b-1",), {}),
    ("upgrade", (RUN_ID,), {"build_id": "b-2"}),
    ("upgrade_build", ("b-1",), {"to_build_id": None, "queue": "default", "limit": 5}),
    ("handlers", (), {}),
    ("workers", (), {}),
    ("queues", (), {}),
    ("declare_queue", ("default",), {}),
    ("create_many", ([{"handler": "demo.echo", "input": {"a": 1}, "queue": None}],), {}),
    ("queue_series", ("default",), {"minutes": 5}),
    ("drain_worker", ("w-1-abc",), {}),
    ("list_runs", (), {"metadata": {"tenant": "acme"}, "status": None}),
    ("undeclare_queue", ("default",), {}),
]


class Recorder:
    """Answers each path from ANSWERS (a list page for GET /runs) and records the request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, str(request.url.params), body))
        path = request.url.path
        if request.method == "GET" and path == "/runs":
            return httpx.Response(200, json={"items": [RUN], "next_cursor": None})
        if request.method == "GET" and path == "/schedules":
            return httpx.Response(200, json={"items": [SCHEDULE], "next_cursor": None})
        if request.method == "GET" and path == "/keys":
            return httpx.Response(200, json={"items": [KEY_INFO]})
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json=ANSWERS[path])


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def test_both_clients_have_the_same_methods() -> None:
    assert public_methods(Client) - {"close"} == public_methods(AsyncClient) - {"aclose"}
    assert {name for name, _, _ in CALLS} | {"events"} == public_methods(Client) - {"close"}


async def test_every_method_sends_the_same_request_and_reads_the_same_answer() -> None:
    sync_api, async_api = Recorder(), Recorder()
    with Client("http://api", transport=httpx.MockTransport(sync_api)) as client:
        sync_results = [getattr(client, name)(*args, **kw) for name, args, kw in CALLS]
    async with AsyncClient("http://api", transport=httpx.MockTransport(async_api)) as aclient:
        async_results = [await getattr(aclient, name)(*args, **kw) for name, args, kw in CALLS]
    assert sync_api.seen == async_api.seen
    assert sync_results == async_results
    # and what they send is what the API expects: unset options are left out
    assert sync_api.seen[0] == (
        "POST",
        "/runs",
        "",
        {"handler": "demo.echo", "input": {"a": 1}, "queue": "default"},
    )
    assert sync_api.seen[2] == ("GET", "/runs", "status=queued&limit=5", None)
    assert sync_api.seen[-5] == (
        "POST",
        "/runs/batch",
        "",
        {"items": [{"handler": "demo.echo", "input": {"a": 1}}]},
    )
    assert sync_api.seen[3] == ("POST", f"/runs/{RUN_ID}/cancel", "", None)
    assert sync_api.seen[4] == ("DELETE", f"/runs/{RUN_ID}", "", None)
    assert sync_results[4] is None
    assert sync_api.seen[5][3] == {
        "status": "succeeded",
        "finished_before": "2026-01-01T00:00:00+00:00",
    }
    assert sync_api.seen[7][3] == {"action": "succeed", "output": {"ok": True}}
    assert sync_api.seen[8] == ("POST", f"/runs/{RUN_ID}/retry", "", {"checkpoint": "drop"})
    assert sync_api.seen[9][1:] == (
        "/runs/retry",
        "",
        {"handler": "demo.echo", "finished_after": "2026-01-01T00:00:00+00:00"},
    )
    assert [seen[:2] for seen in sync_api.seen[10:13]] == [
        ("GET", f"/operations/{OP_ID}"),
        ("POST", f"/operations/{OP_ID}/resume"),
        ("POST", f"/operations/{OP_ID}/cancel"),
    ]
    assert sync_results[10].filter.handler == "demo.echo"
    assert sync_api.seen[14] == ("GET", "/queues/default/limits", "", None)
    assert sync_api.seen[15] == ("PUT", "/queues/default/limits", "", LIMITS)
    assert sync_results[15] == QueueLimits(**LIMITS)
    assert sync_api.seen[16] == ("PATCH", f"/runs/{RUN_ID}", "", {"priority": 7})
    assert sync_api.seen[17][:2] == ("GET", "/rate-limits")
    assert sync_results[18].template is True
    spec = {"limit": 5, "period_s": 2.0, "burst": 1}
    assert sync_api.seen[19] == ("PUT", "/rate-limits/crm:{tenant}", "", spec)
    assert sync_api.seen[20][:2] == ("DELETE", "/rate-limits/crm:{tenant}")
    assert sync_api.seen[21] == ("GET", f"/runs/{RUN_ID}/children", "limit=10", None)
    assert sync_results[21].items[0].id == RUN_ID
    at = [name for name, _, _ in CALLS].index("create_schedule")  # the schedule calls
    assert sync_api.seen[at] == (
        "POST",
        "/schedules",
        "",
        {"id": "nightly", "run": {"handler": "demo.echo"}, "cron": "30 2 * * *"},
    )
    assert sync_api.seen[at + 2] == ("GET", "/schedules", "limit=10", None)
    assert sync_api.seen[at + 3] == ("PATCH", "/schedules/nightly", "", {"overlap": "allow"})
    assert sync_api.seen[at + 7][3] == {
        "start": "2026-01-01T00:00:00+00:00",
        "end": "2026-01-02T00:00:00+00:00",
    }
    assert sync_results[at + 6].created == [RUN_ID]
    assert [worker.id for worker in sync_results[-8]] == ["w-1-abc"]
    assert sync_api.seen[-12][1:] == ("/builds/b-1", "", None)
    assert sync_api.seen[-11][1:] == (f"/runs/{RUN_ID}/upgrade", "", {"build_id": "b-2"})
    assert sync_api.seen[-10][1:] == ("/builds/b-1/upgrade", "", {"queue": "default", "limit": 5})
    assert sync_results[-10].upgraded == 2 and sync_results[-13][0].pinned.parked == 2
    assert [queue.name for queue in sync_results[-7].items] == ["default"]
    assert sync_api.seen[-6] == ("PUT", "/queues/default", "", None)
    assert sync_results[-6].ready == 1
    assert [item.run.id for item in sync_results[-5].items if item.run] == [RUN_ID]
    assert sync_api.seen[-4] == ("GET", "/queues/default/series", "minutes=5", None)
    assert sync_api.seen[-3] == ("POST", "/workers/w-1-abc/drain", "", None)
    assert sync_results[-3].drain_requested is True
    assert sync_api.seen[-2] == ("GET", "/runs", "metadata.tenant=acme", None)
    assert sync_api.seen[-1] == ("DELETE", "/queues/default", "", None)
    assert sync_results[-1] is None
