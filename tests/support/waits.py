"""One example of every wait the system writes, and the words the table gives it.

The data is what the writer puts in a ``wait`` event or a parked run's ``waiting_for``
(the Lua script or executor module is named beside each). ``tests/test_wait_kinds.py``
renders them with the CLI's reader and ``tests/console/test_wait_words.py`` with the
console's, in Chromium: the same words from both, from the one table.
"""

from __future__ import annotations

from typing import Any

# 2026-11-30 06:40:29.393 UTC: every deadline below is this time of day
AT_MS = 1_796_020_829_393
AT = "06:40:29"

# (name, data, the words); every kind of wait_kinds.json appears at least once
WAITS: list[tuple[str, dict[str, Any], str]] = [
    (
        "sleep (park_run)",
        {"kind": "sleep", "subject": "cool-off", "step": "sleep:cool-off:1", "until_ms": AT_MS},
        f"parked: durable sleep cool-off until {AT}; no lease held",
    ),
    (
        "signal with a timeout (park_run)",
        {"kind": "signal", "subject": "review", "step": "signal:review:1", "until_ms": AT_MS},
        f"parked until signal review arrives, or until {AT} (its timeout); no lease held",
    ),
    (
        "signal without a timeout (park_run)",
        {"kind": "signal", "subject": "review", "step": "signal:review:1", "until_ms": None},
        "parked until signal review arrives; no lease held",
    ),
    (
        "human, as runs get shows it with its question (park_run's waiting_for)",
        {
            "kind": "human",
            "subject": "ask",
            "step": "human:ask:1",
            "since_ms": AT_MS,
            "question": {"refund": "€40", "approve": True},
        },
        'parked until a person answers ask: {"refund":"€40","approve":true}; no lease held',
    ),
    (
        "join with a timeout (join_children)",
        {
            "kind": "join",
            "subject": "settled",
            "step": "join:1",
            "until_ms": AT_MS,
            "children": 3,
            "pending": 2,
        },
        f"parked on a join (settled) of 3 children, 2 not ended yet, or until {AT} "
        "(its timeout); no lease held",
    ),
    (
        "join without a timeout (join_children)",
        {
            "kind": "join",
            "subject": "all",
            "step": "join:1",
            "until_ms": None,
            "children": 2,
            "pending": 2,
        },
        "parked on a join (all) of 2 children, 2 not ended yet; no lease held",
    ),
    (
        "delayed start (create)",
        {"kind": "run_at", "subject": "start", "until_ms": AT_MS},
        f"queued: starts no earlier than {AT} (a delayed start)",
    ),
    (
        "concurrency key at its limit (claim)",
        {
            "kind": "concurrency_limit",
            "subject": "tenant-a",
            "resource": "concurrency_key",
            "limit": 1,
        },
        "queued: concurrency key tenant-a is at its limit of 1 running; "
        "it starts when a slot comes back",
    ),
    (
        "handler at its limit (claim)",
        {"kind": "concurrency_limit", "subject": "demo.sleep", "resource": "handler", "limit": 4},
        "queued: handler demo.sleep is at its limit of 4 running; it starts when a slot comes back",
    ),
    (
        "singleton key held (claim)",
        {
            "kind": "singleton",
            "subject": "nightly",
            "resource": "singleton_key",
            "holder": "default.01J0000000000000000000000A",
        },
        "queued: waits for the run holding singleton key nightly "
        "(default.01J0000000000000000000000A) to end",
    ),
    (
        "rate limit, waiting with its lease (executor/rates.py)",
        {
            "kind": "rate_limited",
            "key": "openai",
            "declared": "openai",
            "until_ms": AT_MS,
            "wait_ms": 1_250,
        },
        # a tie rounds up, as JavaScript's toFixed does (Python's format would say 1.2 s)
        f"rate-limited on openai: waiting for its token until {AT} (1.3 s)",
    ),
    (
        "rate limit, released after a 429 (executor/rates.py)",
        {
            "kind": "rate_limited",
            "key": "openai",
            "declared": "openai",
            "until_ms": AT_MS,
            "wait_ms": 95_000,
            "released": True,
            "reason": "upstream_429",
        },
        f"rate-limited on openai: released until {AT} (1 min 35 s) after an upstream 429; "
        "no attempt spent",
    ),
    (
        "rate limit, a start gate's hold (gcra)",
        {"kind": "rate_limited", "key": "starts", "until_ms": AT_MS, "wait_ms": 400},
        f"rate-limited on starts: waiting for its token until {AT} (400 ms)",
    ),
    (
        "pinned build with no live worker (note_unavailable)",
        {"kind": "build_unavailable", "resource": "build", "subject": "v1", "build_id": "v1"},
        "queued: pinned to build v1, which no live worker of its queue runs; "
        "it starts when one does",
    ),
    (
        "Redis memory past its high-water mark (executor/children.py)",
        {
            "kind": "memory",
            "what": "spawn of demo.echo",
            "reason": "Redis uses 95 of 100 bytes",
            "used_bytes": 95,
            "max_bytes": 100,
            "high_water": 0.9,
        },
        "spawn of demo.echo waits for room in Redis memory: Redis uses 95 of 100 bytes",
    ),
    (
        "operation past its lease, no progress yet (supervision/operation.py)",
        {
            "kind": "tool_call",
            "subject": "crm.search",
            "elapsed_s": 4.9,
            "renewals": 2,
            "lease_s": 2.0,
            "since_progress_s": None,
        },
        "operation tool_call crm.search running for 4.9 s, past its 2.0 s lease; "
        "2 renewals so far; no progress yet. The watchdog is deciding",
    ),
    (
        "operation whose kind is a wait kind's name, with progress",
        {
            "kind": "sleep",
            "subject": "",
            "elapsed_s": 61.0,
            "renewals": 0,
            "lease_s": 30,
            "since_progress_s": 0.0,
        },
        "operation sleep running for 1 min 1 s, past its 30.0 s lease; 0 renewals so far; "
        "last progress 0 ms before this check. The watchdog is deciding",
    ),
    (
        "a kind this table does not know (a newer writer)",
        {"kind": "event", "subject": "invoice.paid", "until_ms": AT_MS},
        f"waiting on event invoice.paid until {AT}",
    ),
    (
        "another unknown kind, with no subject and no time",
        {"kind": "paused"},
        "waiting on paused",
    ),
    ("no kind at all", {}, "waiting"),
    (
        "hostile values: an inherited property's name, template syntax, non-ASCII",
        {"kind": "__proto__", "subject": "{kind} [x] {until_ms:clock} é", "until_ms": None},
        "waiting on __proto__ {kind} [x] {until_ms:clock} é",
    ),
    (
        "a known kind whose field is template syntax",
        {"kind": "signal", "subject": "{kind}[x]", "until_ms": None},
        "parked until signal {kind}[x] arrives; no lease held",
    ),
]

# (blocked_on, the words)
BLOCKED_ON: list[tuple[str, str]] = [
    ("h:demo.sleep", "a slot of handler demo.sleep (at its limit)"),
    ("k:tenant-a", "a slot of concurrency key tenant-a (at its limit)"),
    ("s:nightly", "the run holding singleton key nightly to end"),
    ("b:v1", "a live worker of build v1"),
    ("x:something", "x:something"),
    ("unknown:x", "unknown:x"),
]
