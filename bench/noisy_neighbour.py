"""Noisy neighbours: tenant B's create→start while tenant A hammers its quotas (issue 35).

``PYTHONPATH=. .venv/bin/python bench/noisy_neighbour.py [--rate 20] [--seconds 30]``
(or ``python -m bench.noisy_neighbour``) starts a private stack on this machine: its
own redis-server (no persistence), ONE ``leasehold api`` with LEASEHOLD_API_KEYS set,
and two workers, ``LEASEHOLD_NAMESPACE=tenant-a`` and ``tenant-b``, each serving
queue ``work`` with ``app.demo,bench.handlers``. The bootstrap key declares ``tenant-b``
without quotas and ``tenant-a`` with ``--a-quotas``; every request names its
namespace with ``Leasehold-Namespace``.

Before the phases tenant A is given ``--a-seed-runs`` runs carrying
``--a-seed-metadata-bytes`` of metadata (made before its quotas are set; its worker
runs them), so its listing searches below read a full scan budget, as issue 35
item 6's attack did. Then ``--rounds`` times, alternated so that neither phase
always meets the fuller Redis:

* **baseline**: tenant B alone creates ``bench.lat`` runs at ``--rate`` per second
  for ``--seconds``, open loop: each create is its own task at its scheduled time,
  so a slow answer does not lower the offered rate.
* **noisy**: the same B load while a separate client process (not this one's event
  loop, which times B) hammers as tenant A with ``demo.echo`` runs:
  ``--a-creators`` connections posting runs back to back (past ``creates_per_s`` a
  429), one posting ``--a-schedules`` schedules (past ``schedules`` a 429), and
  ``--a-listers`` searching ``GET /runs?metadata.k=nomatch`` in a loop.

Per B run, on one machine clock: the POST's own latency, and request sent → the
handler's first statement (``bench.lat`` stamps it: the start a caller waits for),
split at the record's ``created_at`` (the create script's Redis TIME) into the API's
part and the queue's and worker's part. The record's ``started_at`` is kept too, but
it is the lease's time: with the worker's hand-off (``LEASEHOLD_HANDOFF``) the create
script itself leases the run to an idle worker, so it equals ``created_at`` and says
nothing of when the handler ran. Success: 201 answers per attempt, and runs that
reached ``succeeded``. Tenant A's answers are counted by kind and outcome (``429
creates_per_s``...). Each phase also records the CPU seconds of Redis (``INFO
cpu``), the API and each worker (``/proc``): which shared resource a slower B
points at. One JSON line goes to ``bench/out/results.jsonl`` and the result to
``--out``; a markdown table for BENCHMARKS.md is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from app.stack import processes
from app.stack.embedded import free_port
from app.stack.processes import Child, child_env
from bench import harness
from bench.handlers import LATENCY_KEY
from bench.harness import OUT_DIR, REPO_ROOT, PrivateRedis, log, percentile
from bench.sse import process_cpu_s

KEY = "noisy-neighbour-bootstrap-key-0123456789"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
QUEUE = "work"
DEFAULT_A_QUOTAS = "creates_per_s=50,live_runs=500,schedules=5,listings_in_flight=1"
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "orphaned", "expired"})
WARMUP_RUNS = 10
SEED_BATCH = 100
SETTLE_S = 2.0
SETTLE_TIMEOUT_S = 120.0
POLL_S = 0.2
READERS = 8  # concurrent GET /runs/{id} when B's runs are read back after a phase
PERCENTILES = (50, 95, 99)
# B's spans per run, in ms: the POST's own; request sent -> the handler's first statement
# (bench.lat's stamp: the start a user waits for), -> the record's started_at (the lease:
# with the worker's hand-off the create script stamps it, so it equals created_at), ->
# created_at (the API's part); created_at -> the handler (the queue's and worker's part)
SPANS = (
    "post_ms",
    "sent_to_handler_ms",
    "sent_to_started_at_ms",
    "sent_to_created_ms",
    "created_to_handler_ms",
)


ADMIN = {"Authorization": f"Bearer {KEY}"}


def headers(namespace: str) -> dict[str, str]:
    """The bootstrap (admin) key, addressing ``namespace``."""
    return {**ADMIN, "Leasehold-Namespace": namespace}


def parse_quotas(text: str) -> dict[str, int]:
    """``creates_per_s=50,live_runs=500`` as ``PUT /namespaces`` takes it; ``""``: none."""
    quotas: dict[str, int] = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"not name=value: {part!r}")
        quotas[name.strip()] = int(value)
    return quotas


def outcome(status: int, body: bytes) -> str:
    """An answer as counted: its status, and for a 429 the quota its problem names."""
    if status != 429:
        return str(status)
    with contextlib.suppress(ValueError, AttributeError):
        quota = json.loads(body).get("quota")
        if quota:
            return f"429 {quota}"
    return "429"


@dataclass(frozen=True)
class Send:
    """One create of tenant B: when it was sent and answered (``time.time()``), how."""

    sent_s: float
    answered_s: float
    outcome: str
    run_id: str | None


def _ms(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() * 1000 if value else None


def _spread(values: list[float]) -> dict[str, float | None]:
    shown: dict[str, float | None] = {
        f"p{pct}": round(percentile(values, pct), 1) if values else None for pct in PERCENTILES
    }
    shown["max"] = round(max(values), 1) if values else None
    return shown


def summarize(
    sends: list[Send],
    runs: dict[str, dict[str, Any]],
    handler_starts: dict[float, float],
    seconds: float,
) -> dict[str, Any]:
    """Tenant B's phase: answers, success, and latencies in ms (p50/p95/p99/max).

    ``runs``: each created run as ``GET /runs/{id}`` last showed it;
    ``handler_starts``: ``bench.lat``'s stamps, send time -> the handler's first
    statement (epoch s); ``seconds``: how long the sends took (the achieved rate is
    attempts over it).
    """
    spans: dict[str, list[float]] = {name: [] for name in SPANS}
    for send in sends:
        spans["post_ms"].append((send.answered_s - send.sent_s) * 1000)
        run = runs.get(send.run_id or "") or {}
        created, leased = _ms(run.get("created_at")), _ms(run.get("started_at"))
        began = handler_starts.get(send.sent_s)
        sent_ms = send.sent_s * 1000
        if began is not None:
            spans["sent_to_handler_ms"].append(began * 1000 - sent_ms)
        if created is not None and leased is not None:
            spans["sent_to_started_at_ms"].append(leased - sent_ms)
            spans["sent_to_created_ms"].append(created - sent_ms)
        if created is not None and began is not None:
            spans["created_to_handler_ms"].append(began * 1000 - created)
    created_count = sum(1 for send in sends if send.outcome == "201")
    succeeded = sum(1 for run in runs.values() if run.get("status") == "succeeded")
    return {
        "attempts": len(sends),
        "answers": dict(Counter(send.outcome for send in sends)),
        "created": created_count,
        "succeeded": succeeded,
        "handler_stamps": sum(1 for send in sends if send.sent_s in handler_starts),
        "create_success": round(created_count / len(sends), 4) if sends else None,
        "run_success": round(succeeded / created_count, 4) if created_count else None,
        "requests_per_s": round(len(sends) / seconds, 2) if seconds > 0 else None,
        **{name: _spread(values) for name, values in spans.items()},
    }


# ---- tenant A: the noisy client, a process of its own ----


async def _hammer(
    http: httpx.AsyncClient, stop: asyncio.Event, counts: Counter[str], kind: str
) -> None:
    """One connection's loop: create runs, or search for a match that never comes."""
    body = {"handler": "demo.echo", "queue": QUEUE, "input": {}, "metadata": {"k": "noisy"}}
    while not stop.is_set():
        try:
            if kind == "create":
                answer = await http.post("/runs", json=body)
            else:
                answer = await http.get("/runs", params={"metadata.k": "nomatch", "limit": 50})
            counts[f"{kind} {outcome(answer.status_code, answer.content)}"] += 1
        except httpx.HTTPError as exc:
            counts[f"{kind} {type(exc).__name__}"] += 1


async def _schedules(http: httpx.AsyncClient, count: int, counts: Counter[str]) -> None:
    """Ask for ``count`` schedules, one after another (a 429 once past the quota)."""
    run = {"handler": "demo.echo", "queue": QUEUE, "input": {}}
    for i in range(count):
        body = {"id": f"noisy-{i}-{time.time_ns()}", "interval_s": 3600.0, "run": run}
        answer = await http.post("/schedules", json=body)
        counts[f"schedule {outcome(answer.status_code, answer.content)}"] += 1


async def _until_stdin_closes(stop: asyncio.Event) -> None:
    await asyncio.to_thread(sys.stdin.read)
    stop.set()


async def tenant_a(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Hammer as tenant A from ``ready`` (printed) until stdin closes; the counts."""
    connections = args.a_creators + args.a_listers + 1
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    counts: Counter[str] = Counter()
    stop = asyncio.Event()
    async with httpx.AsyncClient(
        base_url=url, headers=headers(TENANT_A), timeout=30, limits=limits
    ) as http:
        print("ready", flush=True)
        watcher = asyncio.create_task(_until_stdin_closes(stop))
        started, cpu_before = time.perf_counter(), time.process_time()
        loops = [_hammer(http, stop, counts, "create") for _ in range(args.a_creators)]
        loops += [_hammer(http, stop, counts, "list") for _ in range(args.a_listers)]
        await asyncio.gather(_schedules(http, args.a_schedules, counts), *loops)
        seconds = time.perf_counter() - started
        await watcher
    requests = sum(counts.values())
    return {
        "answers": dict(sorted(counts.items())),
        "seconds": round(seconds, 2),
        "requests_per_s": round(requests / seconds, 1),
        "client_cpu_s": round(time.process_time() - cpu_before, 2),
    }


# ---- the stack ----


@dataclass
class Stack:
    """The private stack: its Redis, the API (URL and process) and the two workers."""

    url: str
    redis: PrivateRedis
    api: Child
    workers: dict[str, Child]


async def _expect(answer: httpx.Response, *statuses: int) -> httpx.Response:
    if answer.status_code not in statuses:
        raise RuntimeError(f"{answer.request.url}: HTTP {answer.status_code} {answer.text[:300]}")
    return answer


async def _poll(probe: Any, what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> Any:
    """Call ``probe()`` until it returns something truthy; raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := await probe():
            return found
        await asyncio.sleep(POLL_S)
    raise RuntimeError(f"no {what} in {timeout_s:g} s")


@contextlib.asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    """Redis, one API, then the namespaces (no quotas yet) and one worker in each."""
    async with harness.private_redis("noisy") as redis:
        port = free_port()
        env = {
            "LEASEHOLD_REDIS_URL": redis.url,
            "LEASEHOLD_API_PORT": str(port),
            "LEASEHOLD_API_KEYS": KEY,
            # bench.lat (B's runs) stamps the handler's start: bench.handlers
            "LEASEHOLD_HANDLERS": harness.BENCH_HANDLERS,
            "LEASEHOLD_QUEUES": QUEUE,
            "LEASEHOLD_LOG_LEVEL": "WARNING",
        }
        api = harness.spawn("noisy-api", ["api"], env)
        workers: dict[str, Child] = {}
        try:
            url = f"http://127.0.0.1:{port}"
            await asyncio.to_thread(processes.wait_healthy, url, api, timeout_s=60)
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                for name in (TENANT_A, TENANT_B):
                    put = http.put(f"/namespaces/{name}", json={}, headers=ADMIN)
                    await _expect(await put, 200, 201)
                    worker_env = {**env, "LEASEHOLD_NAMESPACE": name}
                    workers[name] = harness.spawn(f"noisy-worker-{name}", ["worker"], worker_env)
                for name in (TENANT_A, TENANT_B):
                    await _poll(lambda n=name: _declared(http, n), f"queue {QUEUE} in {name}")
            yield Stack(url, redis, api, workers)
        finally:
            processes.stop_all([*workers.values(), api])


async def _declared(http: httpx.AsyncClient, namespace: str) -> bool:
    """The namespace's worker has declared its queue there (it does so as it starts)."""
    return (await http.get(f"/queues/{QUEUE}", headers=headers(namespace))).status_code == 200


async def seed_a(http: httpx.AsyncClient, *, runs: int, metadata_bytes: int) -> None:
    """Give tenant A ``runs`` ended runs with ``metadata_bytes`` of metadata each."""
    pad = "x" * metadata_bytes
    for start in range(0, runs, SEED_BATCH):
        items = [
            {"handler": "demo.echo", "queue": QUEUE, "input": {}, "metadata": {"k": i, "pad": pad}}
            for i in range(start, min(start + SEED_BATCH, runs))
        ]
        answer = await _expect(await http.post("/runs/batch", json={"items": items}), 200)
        if answer.content.count(b'"status":201') != len(items):
            raise RuntimeError(f"seed batch: {answer.text[:300]}")
    await _poll(lambda: _idle(http), f"{TENANT_A} drained")


async def _idle(http: httpx.AsyncClient) -> bool:
    answer = await _expect(await http.get(f"/namespaces/{TENANT_A}"), 200)
    live: int = answer.json()["usage"]["live_runs"]
    return live == 0


# ---- tenant B: the measured load ----


async def _create_b(http: httpx.AsyncClient) -> Send:
    sent = time.time()
    body = {"handler": "bench.lat", "queue": QUEUE, "input": {"enqueued_at": sent}}
    try:
        answer = await http.post("/runs", json=body)
    except httpx.HTTPError as exc:
        return Send(sent, time.time(), type(exc).__name__, None)
    answered = time.time()
    run_id = answer.json()["id"] if answer.status_code == 201 else None
    return Send(sent, answered, outcome(answer.status_code, answer.content), run_id)


async def _paced(
    http: httpx.AsyncClient, *, rate: float, seconds: float
) -> tuple[list[Send], float]:
    """``rate * seconds`` creates, each a task at its scheduled time; the sends and their span."""
    tasks: list[asyncio.Task[Send]] = []
    start = time.perf_counter()
    for i in range(round(rate * seconds)):
        pause = start + i / rate - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        tasks.append(asyncio.create_task(_create_b(http)))
    span = time.perf_counter() - start
    return list(await asyncio.gather(*tasks)), span


async def _read_back(http: httpx.AsyncClient, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run as ``GET /runs/{id}`` shows it once ended (or at the timeout)."""
    gate = asyncio.Semaphore(READERS)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S

    async def read(run_id: str) -> dict[str, Any]:
        async with gate:
            while True:
                run: dict[str, Any] = (await http.get(f"/runs/{run_id}")).json()
                if run.get("status") in TERMINAL or time.monotonic() > deadline:
                    return run
                await asyncio.sleep(POLL_S)

    return dict(zip(run_ids, await asyncio.gather(*map(read, run_ids)), strict=True))


async def _handler_starts(stack: Stack) -> dict[float, float]:
    """``bench.lat``'s stamps since the last call (then cleared): send time -> start."""
    pipe = stack.redis.client.pipeline(transaction=True)
    pipe.lrange(LATENCY_KEY, 0, -1)
    pipe.delete(LATENCY_KEY)
    entries, _ = await pipe.execute()
    starts: dict[float, float] = {}
    for entry in entries:
        sent, began = entry.split()
        starts[float(sent)] = float(began)
    return starts


@dataclass
class CpuMeter:
    """CPU seconds of Redis, the API and the workers since it was made."""

    stack: Stack
    before: dict[str, float]

    @classmethod
    async def start(cls, stack: Stack) -> CpuMeter:
        """Read every process's CPU now."""
        return cls(stack, await cls._now(stack))

    @staticmethod
    async def _now(stack: Stack) -> dict[str, float]:
        now = {"redis": (await harness.counters(stack.redis.client)).cpu_s}
        now["api"] = process_cpu_s(stack.api.pid)
        now |= {f"worker {name}": process_cpu_s(w.pid) for name, w in stack.workers.items()}
        return now

    async def spent(self) -> dict[str, float]:
        """CPU seconds each process spent since :meth:`start`."""
        now = await self._now(self.stack)
        return {name: round(now[name] - self.before[name], 2) for name in now}


async def _start_tenant_a(url: str, args: argparse.Namespace) -> asyncio.subprocess.Process:
    command = [sys.executable, "-m", "bench.noisy_neighbour", "--tenant-a-child", url]
    command += ["--a-creators", str(args.a_creators), "--a-listers", str(args.a_listers)]
    command += ["--a-schedules", str(args.a_schedules)]
    noisy = await asyncio.create_subprocess_exec(
        *command,
        cwd=REPO_ROOT,
        env=child_env({"PYTHONPATH": str(REPO_ROOT)}),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert noisy.stdout is not None
    if (await noisy.stdout.readline()).strip() != b"ready":
        raise RuntimeError("tenant A's client did not start")
    return noisy


async def phase(stack: Stack, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One phase: B's paced creates (with A hammering when ``name`` is noisy), read back."""
    load = harness.load_average()
    noisy = await _start_tenant_a(stack.url, args) if name == "noisy" else None
    meter = await CpuMeter.start(stack)
    async with httpx.AsyncClient(base_url=stack.url, headers=headers(TENANT_B), timeout=30) as http:
        sends, span = await _paced(http, rate=args.rate, seconds=args.seconds)
        cpu_s = await meter.spent()
        tenant_a_counts = None
        if noisy is not None:
            out, _ = await noisy.communicate(b"")  # closing its stdin stops it
            tenant_a_counts = json.loads(out)
        runs = await _read_back(http, [s.run_id for s in sends if s.run_id])
    handler_starts = await _handler_starts(stack)
    result: dict[str, Any] = {
        "phase": name,
        "load_before": load,
        "seconds": round(span, 2),
        "tenant_b": summarize(sends, runs, handler_starts, span),
        "tenant_a": tenant_a_counts,
        "cpu_s": cpu_s,
    }
    b = result["tenant_b"]
    log(
        f"{name}: B {b['created']}/{b['attempts']} created, {b['succeeded']} succeeded, "
        f"sent→handler p50/p95/p99 {list(b['sent_to_handler_ms'].values())[:3]} ms, "
        f"CPU {cpu_s} (load {load[0]:.2f})"
    )
    return result


# ---- the report ----


def _cell(spread: dict[str, float | None]) -> str:
    return " / ".join(
        "-" if spread[f"p{pct}"] is None else f"{spread[f'p{pct}']:g}" for pct in PERCENTILES
    )


def markdown_table(phases: list[dict[str, Any]]) -> str:
    """One row per phase, ready for BENCHMARKS.md; tenant A's answers in their own table."""
    lines = [
        "| phase | load | B sent→handler start p50 / p95 / p99 ms | B sent→created_at "
        "| B created_at→handler | B POST answer | B 201 / attempts | B succeeded | B req/s "
        "| CPU s: Redis / API / worker A / worker B |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in phases:
        b, cpu = row["tenant_b"], row["cpu_s"]
        lines.append(
            f"| {row['phase']} | {row['load_before'][0]:.2f} | {_cell(b['sent_to_handler_ms'])} "
            f"| {_cell(b['sent_to_created_ms'])} | {_cell(b['created_to_handler_ms'])} "
            f"| {_cell(b['post_ms'])} | {b['created']} / {b['attempts']} | {b['succeeded']} "
            f"| {b['requests_per_s']} | {cpu['redis']} / {cpu['api']} "
            f"/ {cpu[f'worker {TENANT_A}']} / {cpu[f'worker {TENANT_B}']} |"
        )
    noisy = [row for row in phases if row["tenant_a"]]
    if noisy:
        lines += [
            "",
            "| noisy phase | tenant A answers | A req/s | A client CPU s |",
            "|---|---|---|---|",
        ]
        for i, row in enumerate(noisy, 1):
            a = row["tenant_a"]
            answers = ", ".join(f"{name}: {count}" for name, count in a["answers"].items())
            lines.append(f"| {i} | {answers} | {a['requests_per_s']} | {a['client_cpu_s']} |")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    """Start the stack, seed and limit tenant A, warm B, run the phases, report."""
    harness.compile_bytecode()
    async with stack() as running:
        async with httpx.AsyncClient(
            base_url=running.url, headers=headers(TENANT_A), timeout=60
        ) as http:
            log(f"seeding {TENANT_A}: {args.a_seed_runs} runs")
            await seed_a(http, runs=args.a_seed_runs, metadata_bytes=args.a_seed_metadata_bytes)
            put = http.put(f"/namespaces/{TENANT_A}", json={"quotas": args.a_quotas})
            await _expect(await put, 200)
        async with httpx.AsyncClient(
            base_url=running.url, headers=headers(TENANT_B), timeout=30
        ) as http:
            warm = [await _create_b(http) for _ in range(WARMUP_RUNS)]
            await _read_back(http, [send.run_id for send in warm if send.run_id])
        await _handler_starts(running)  # the warm-up's stamps: not measured
        phases = []
        for _ in range(args.rounds):
            for name in ("baseline", "noisy"):
                await asyncio.sleep(SETTLE_S)
                phases.append(await phase(running, name, args))
        result = {
            **(await harness.header(running.redis.client, args.label)),
            "bench": "noisy_neighbour",
            "rate": args.rate,
            "seconds": args.seconds,
            "a_quotas": args.a_quotas,
            "a_seed": {"runs": args.a_seed_runs, "metadata_bytes": args.a_seed_metadata_bytes},
            "a_connections": {"creators": args.a_creators, "listers": args.a_listers},
            "phases": phases,
        }
    harness.record(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print()
    print(markdown_table(phases))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="tenant B's creates per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="each phase's length")
    parser.add_argument("--rounds", type=int, default=2, help="baseline+noisy pairs")
    parser.add_argument(
        "--a-quotas",
        type=parse_quotas,
        default=parse_quotas(DEFAULT_A_QUOTAS),
        help=f"tenant A's quotas, name=value,... (default {DEFAULT_A_QUOTAS})",
    )
    parser.add_argument("--a-creators", type=int, default=8, help="A's create connections")
    parser.add_argument("--a-listers", type=int, default=2, help="A's search connections")
    parser.add_argument("--a-schedules", type=int, default=50, help="schedules A asks for")
    parser.add_argument("--a-seed-runs", type=int, default=2000, help="A's runs before phases")
    parser.add_argument("--a-seed-metadata-bytes", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=OUT_DIR / "noisy_neighbour.json")
    parser.add_argument("--label", default="noisy-neighbour")
    parser.add_argument("--tenant-a-child", metavar="URL", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> None:
    """The benchmark, or (``--tenant-a-child``) tenant A's client inside it."""
    args = parse_args(argv)
    if args.tenant_a_child:
        print(json.dumps(asyncio.run(tenant_a(args.tenant_a_child, args))), flush=True)
        return
    asyncio.run(main(args))


if __name__ == "__main__":
    run()
