"""``python -m bench.sse``: how fast run events reach SSE followers, and how many a run can push.

Everything runs on this machine: the benchmark's own redis-server (no
persistence), ONE ``leasehold api`` process (``--api-processes N``: N independent
replicas, client processes spread over them) and ONE ``leasehold worker``, and
follower processes (:mod:`bench.followers`) on loopback.

* **latency**: a ``bench.ticks`` run waits until the API's
  ``leasehold_sse_subscribers`` gauge shows every follower attached, then emits
  20 events/s for 10 s, each carrying its wall-clock emit time; N followers
  (1, 100, 1,000 by default) record ``receive - emit`` per event on the same
  clock. Reported over every (follower, event) pair: p50, p99, max, and whether
  every follower got every event in order and the terminal event. The emit→append
  part (the XADD's stream id, Redis's clock, ms resolution) is shown beside it.
  Followers are split over client processes (``--per-process``) so that the
  client's parsing is not what is measured; their CPU is reported.
* **tokens**: a ``bench.tokens`` run emits N token events back to back to one
  follower: events/s of the handler's emit loop, events/s written to Redis (first
  emit to the terminal event's append), events/s the follower received (first to
  last token), and the end-to-end time (first emit to last token received). The
  stream cap is raised to N (``--events-maxlen``) so that what is measured is
  full delivery: at the default cap a follower more than 10,000 events behind the
  writer gets a ``replay_unavailable`` notice in place of the trimmed events.
* **cost**: CPU seconds of the API, the worker and the client processes over each
  measurement (from ``/proc``), i.e. what one delivered message costs each side.
  The API's is also given up to the run's end (``api_live_*``: the ticks'
  fan-out, without the followers' teardown) and split into its system part (the
  kernel's socket sends); the clients' from their last follower attached to
  their last terminal event (``client_live_*``: receiving, without attaching or
  parsing, which :mod:`bench.followers` does after the run).
* **per tick** (``per_tick``): each tick's first follower's latency and the
  spread to its last one, over the ticks: a late *first* follower means the
  event left the API late; a wide spread, that its fan-out (or the client's
  reads of it) took that long.
* **idle** (``--idle N``): N followers of a run that emits nothing, all in one
  client process; the API's resident memory before and after they attach, per
  follower. The caps (``LEASEHOLD_SSE_MAX_FOLLOWERS``, ``_API_MAX_CONNECTIONS``)
  are raised to fit N, and this process's open-file limit (inherited by the API
  and the clients it starts) is raised to fit them too (``setrlimit``; the app
  itself never touches it). ``--live K`` adds, while the N idle followers are
  held, K followers of a ``bench.ticks`` run (``--rate``, ``--seconds``) in a
  second client process: their delivery latency among the idle ones.

``--pin`` puts the API processes on core 0 and the client processes on core 1
(``sched_setaffinity``), so that the clients take no CPU from the API they measure.

The load average is recorded before every repetition: the machine is shared.
Results are printed and appended as one JSON line (``"benchmark": "sse"``) to
``bench/out/results.jsonl``.

    .venv/bin/python -m bench.sse                       # everything, ~4 min
    .venv/bin/python -m bench.sse --followers 1000 --reps 1 --skip tokens
    .venv/bin/python -m bench.sse --followers 1000 --per-process 1000 --pin --skip tokens
    .venv/bin/python -m bench.sse --idle 10000 --pin --skip latency tokens
    .venv/bin/python -m bench.sse --idle 10000 --live 10 --pin --skip latency tokens
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.settings import Settings
from app.stack import processes
from app.stack.embedded import free_port
from app.stack.processes import Child, child_env, wait_healthy
from app.store.lua.scripts import Scripts
from app.store.runs.store import RunStore
from bench import harness
from bench.handlers import GO_KEY
from bench.harness import Bench, log, percentile

ATTACH_TIMEOUT_S = 180.0
HEALTH_TIMEOUT_S = 30.0
FINISH_GRACE_S = 180.0
POLL_S = 0.05
QUIET_WAIT_S = 120.0
IDLE_HOLD_S = 20.0  # idle followers held this long: longer than a keep-alive period
WORKER_CONCURRENCY = 4
SUBSCRIBERS_GAUGE = "leasehold_sse_subscribers "
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
FD_HEADROOM = 1024  # files besides the followers' sockets: Redis pools, logs, the venv


@dataclass
class Stack:
    """The processes under test and a client to drive them."""

    bench: Bench
    bases: list[str]  # one per API process; followers are spread over them
    http: httpx.AsyncClient  # on the first API
    api_pids: list[int]
    worker_pid: int
    out_dir: Path
    client: str  # bench.followers --client
    pin: bool  # clients on core 1 (the APIs are on core 0)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a running process has used (from /proc)."""
    return sum(process_cpu_split(pid))


def process_cpu_split(pid: int) -> tuple[float, float]:
    """User and system (the kernel's, e.g. its socket sends) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS_PER_S, int(fields[12]) / CLOCK_TICKS_PER_S


def rss_mb(pid: int) -> float:
    """Resident memory of a running process, MiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def pin(pid: int, core: int) -> None:
    """Keep a process (all its threads) on one core, when the machine has it."""
    if core < (os.cpu_count() or 1):
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), {core})


def raise_fd_limit(sockets: int) -> int:
    """Raise this process's soft open-file limit to fit ``sockets``; its new value.

    The API and the client processes started from here inherit it. Only the soft
    limit moves (up to the hard one, which needs no privilege); a hard limit too
    low to fit them is said plainly rather than measured as refused connections.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = sockets + FD_HEADROOM
    if hard != resource.RLIM_INFINITY and hard < wanted:
        raise SystemExit(f"{sockets} followers need {wanted} open files; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return wanted
    return soft


def cpu_snapshot(stack: Stack) -> dict[str, float]:
    """CPU seconds of the API processes (together) and the worker so far."""
    splits = [process_cpu_split(pid) for pid in stack.api_pids]
    user, system = sum(split[0] for split in splits), sum(split[1] for split in splits)
    return {
        "api": user + system,
        "api_system": system,
        "worker": process_cpu_s(stack.worker_pid),
    }


@contextlib.asynccontextmanager
async def stack(
    bench: Bench,
    out_dir: Path,
    *,
    client: str,
    events_maxlen: int,
    api_processes: int,
    pinned: bool,
    max_followers: int,
) -> AsyncIterator[Stack]:
    """API processes (independent replicas, as behind a load balancer) and one worker."""
    env = bench.env(LEASEHOLD_EVENTS_MAXLEN=str(events_maxlen))
    if max_followers:
        env |= {
            "LEASEHOLD_SSE_MAX_FOLLOWERS": str(max_followers),
            "LEASEHOLD_API_MAX_CONNECTIONS": str(max_followers + 100),
        }
    worker_args = ["worker", "--concurrency", str(WORKER_CONCURRENCY)]
    with contextlib.ExitStack() as processes:
        ports = [free_port() for _ in range(api_processes)]
        apis = [
            processes.enter_context(
                harness.running(f"api-sse-{index}", ["api", "--port", str(port)], env)
            )
            for index, port in enumerate(ports)
        ]
        worker = processes.enter_context(harness.running("worker-sse", worker_args, env))
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        for base, api in zip(bases, apis, strict=True):
            await asyncio.to_thread(wait_healthy, base, api, timeout_s=HEALTH_TIMEOUT_S)
            if pinned:
                pin(api.pid, 0)
        async with httpx.AsyncClient(base_url=bases[0], timeout=30) as http:
            pids = [api.pid for api in apis]
            yield Stack(bench, bases, http, pids, worker.pid, out_dir, client, pinned)


async def subscribers(stack: Stack) -> int:
    """Followers attached, over every API process (their ``leasehold_sse_subscribers``)."""
    counts = [await api_subscribers(stack.http, base) for base in stack.bases]
    return sum(counts)


async def api_subscribers(http: httpx.AsyncClient, base: str) -> int:
    """One API process's ``leasehold_sse_subscribers`` gauge."""
    text = (await http.get(f"{base}/metrics")).text
    for line in text.splitlines():
        if line.startswith(SUBSCRIBERS_GAUGE):
            return int(float(line.removeprefix(SUBSCRIBERS_GAUGE)))
    return 0


@contextlib.contextmanager
def followers(
    stack: Stack, run_id: str, count: int, per_process: int
) -> Iterator[list[tuple[Child, Path]]]:
    """Client processes holding ``count`` followers of ``run_id``; stopped on exit."""
    procs = []
    env = child_env({"PYTHONPATH": str(harness.REPO_ROOT)})
    try:
        for index in range(math.ceil(count / per_process)):
            share = min(per_process, count - index * per_process)
            out = stack.out_dir / f"{run_id}-{index}.json"
            base = stack.bases[index % len(stack.bases)]
            args = ["--url", base, "--run", run_id, "--count", str(share), "--out", str(out)]
            args += ["--client", stack.client]
            proc = processes.spawn(
                f"followers-{index}", args, env=env, module="bench.followers", cwd=harness.REPO_ROOT
            )
            if stack.pin:
                pin(proc.pid, 1)
            procs.append((proc, out))
        yield procs
    finally:
        for proc, _ in procs:
            harness.stop(proc, grace_s=2.0)


async def wait_attached(stack: Stack, count: int, procs: list[tuple[Child, Path]]) -> float:
    """Wait until the API counts ``count`` followers; returns how long attaching took."""
    t0 = time.perf_counter()
    while (attached := await subscribers(stack)) < count:
        if time.perf_counter() - t0 > ATTACH_TIMEOUT_S:
            raise RuntimeError(f"only {attached} of {count} followers attached")
        if any(not proc.alive() for proc, _ in procs):
            raise RuntimeError("a follower process exited before every follower attached")
        await asyncio.sleep(POLL_S)
    return time.perf_counter() - t0


async def collect(procs: list[tuple[Child, Path]], timeout_s: float) -> dict[str, Any]:
    """Wait for every client process and merge their findings."""
    deadline = time.monotonic() + timeout_s
    while any(proc.alive() for proc, _ in procs):
        if time.monotonic() > deadline:
            raise RuntimeError("followers did not finish in time")
        await asyncio.sleep(POLL_S)
    merged: dict[str, Any] = {"followers": [], "client_cpu_s": [], "client_wall_s": []}
    merged |= {"client_live_cpu_s": [], "client_parse_cpu_s": []}
    for _, out in procs:
        found = json.loads(out.read_text())
        merged["followers"] += found["followers"]
        merged["client_cpu_s"].append(round(found["cpu_s"], 2))
        merged["client_wall_s"].append(round(found["wall_s"], 2))
        for key in ("live_cpu_s", "parse_cpu_s"):  # None from an httpx client
            if found.get(key) is not None:
                merged[f"client_{key}"].append(round(found[key], 3))
    return merged


async def create(stack: Stack, handler: str, params: dict[str, Any]) -> str:
    """Create a run over HTTP; its id."""
    response = await stack.http.post("/runs", json={"handler": handler, "input": params})
    response.raise_for_status()
    run_id: str = response.json()["id"]
    return run_id


async def go(stack: Stack, run_id: str) -> None:
    """Tell the run's handler that its followers are attached."""
    await stack.bench.client.set(GO_KEY.format(run_id=run_id), 1, ex=3600)


def ms(seconds: float) -> float:
    """Seconds to milliseconds, rounded for the table."""
    return round(seconds * 1000, 2)


def distribution(values_s: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``values_s``, in ms."""
    return {
        "p50_ms": ms(percentile(values_s, 50)),
        "p99_ms": ms(percentile(values_s, 99)),
        "max_ms": ms(max(values_s, default=float("nan"))),
    }


async def append_delays(stack: Stack, run_id: str) -> list[float]:
    """Emit→append per tick: the XADD's stream-id time (Redis clock, ms) minus ``t``."""
    events = await stack.bench.store.read_events(run_id, count=100_000)
    return [
        int(event.id.split("-")[0]) / 1000 - event.data["t"]
        for event in events
        if event.type == "tick"
    ]


def per_tick(followers: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a late delivery came from: each tick's first follower, and its spread to the last.

    A tick whose *first* follower is late was late leaving the API (or the worker,
    or Redis); a tick whose first follower is on time but whose last is late took
    that long to fan out (or for the client to read). Over the ticks every
    follower got (all of them when every follower is complete).
    """
    complete = [f["latencies_s"] for f in followers if f["in_order"] and f["latencies_s"]]
    ticks = min((len(values) for values in complete), default=0)
    firsts, spreads = [], []
    for index in range(ticks):
        column = [values[index] for values in complete]
        firsts.append(min(column))
        spreads.append(max(column) - min(column))
    return {"first": distribution(firsts), "spread": distribution(spreads)}


def completeness(found: dict[str, Any], expected: int) -> dict[str, Any]:
    """How many followers got all ``expected`` events, in order, then the terminal one."""
    seen = found["followers"]
    complete = sum(
        1
        for f in seen
        if f["received"] == expected and f["in_order"] and f["terminal"] == "succeeded"
    )
    return {
        "followers_complete": complete,
        "events_received": sum(f["received"] for f in seen),
        "events_expected": expected * len(seen),
        "silent_gaps": sum(1 for f in seen if not f["in_order"]),  # out of order or unannounced
        "gap_notices": sum(f["gaps"] for f in seen),
        "errors": sorted({f["error"] for f in seen if f["error"]}),
    }


@dataclass
class Ticking:
    """What the followers of one ``bench.ticks`` run saw, and the CPU spent while it ticked."""

    run_id: str
    ticks: int
    processes: int
    attach_s: float
    found: dict[str, Any]
    cpu_before: dict[str, float]
    cpu_after: dict[str, float]
    cpu_at_end: dict[str, float]  # when the run had finished: the ticks' fan-out, no teardown

    @property
    def latencies_s(self) -> list[float]:
        """receive - emit of every (follower, tick) pair."""
        return [value for f in self.found["followers"] for value in f["latencies_s"]]


async def tick(
    stack: Stack,
    count: int,
    per_process: int,
    rate_per_s: float,
    seconds: float,
    *,
    attached_already: int = 0,
) -> Ticking:
    """``count`` followers of a new ``bench.ticks`` run, attached, then the run's ticks."""
    ticks = round(rate_per_s * seconds)
    run_id = await create(stack, "bench.ticks", {"count": ticks, "rate_per_s": rate_per_s})
    with followers(stack, run_id, count, per_process) as procs:
        attach_s = await wait_attached(stack, attached_already + count, procs)
        before = cpu_snapshot(stack)
        await go(stack, run_id)
        at_end = await cpu_when_finished(stack, run_id, seconds + FINISH_GRACE_S)
        found = await collect(procs, seconds + FINISH_GRACE_S)
        after = cpu_snapshot(stack)
    return Ticking(run_id, ticks, len(procs), attach_s, found, before, after, at_end)


async def cpu_when_finished(stack: Stack, run_id: str, timeout_s: float) -> dict[str, float]:
    """The CPU snapshot once the run has finished (its terminal event appended).

    What the API spent from ``go`` to here is the ticks' fan-out; after it come
    the terminal event and the followers' teardown (each stream's end, its
    connection closed), which a per-message figure should not be charged with.
    """
    deadline = time.monotonic() + timeout_s
    while not (await stack.bench.store.get(run_id)).status.is_terminal:
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not finish in time")
        await asyncio.sleep(POLL_S)
    return cpu_snapshot(stack)


async def latency_rep(
    stack: Stack, *, count: int, per_process: int, rate_per_s: float, seconds: float
) -> dict[str, Any]:
    """One repetition: ``count`` followers of one ``bench.ticks`` run."""
    load = harness.load_average()
    ticking = await tick(stack, count, per_process, rate_per_s, seconds)
    found, before, after = ticking.found, ticking.cpu_before, ticking.cpu_after
    at_end = ticking.cpu_at_end
    ticks = ticking.ticks
    rep = {
        "followers": count,
        "client_processes": ticking.processes,
        "load_before": load,
        "ticks": ticks,
        "rate_per_s": rate_per_s,
        "attach_s": round(ticking.attach_s, 2),
        **distribution(ticking.latencies_s),
        "emit_to_append": distribution(await append_delays(stack, ticking.run_id)),
        **completeness(found, ticks),
        "api_cpu_s": round(after["api"] - before["api"], 2),
        "api_system_cpu_s": round(after["api_system"] - before["api_system"], 2),
        "api_live_cpu_s": round(at_end["api"] - before["api"], 2),
        "api_live_system_cpu_s": round(at_end["api_system"] - before["api_system"], 2),
        "worker_cpu_s": round(after["worker"] - before["worker"], 2),
        "client_cpu_s": found["client_cpu_s"],
        "client_live_cpu_s": found["client_live_cpu_s"],
        "client_parse_cpu_s": found["client_parse_cpu_s"],
        "client_wall_s": found["client_wall_s"],
        "per_tick": per_tick(found["followers"]),
    }
    messages = count * ticks
    rep["api_cpu_us_per_message"] = round(rep["api_cpu_s"] / messages * 1e6, 1)
    rep["api_live_cpu_us_per_message"] = round(rep["api_live_cpu_s"] / messages * 1e6, 1)
    rep["client_cpu_us_per_message"] = round(sum(found["client_cpu_s"]) / messages * 1e6, 1)
    # what receiving the events cost the clients, attaching and parsing left out
    live_cpu = sum(found["client_live_cpu_s"]) if found["client_live_cpu_s"] else math.nan
    rep["client_live_cpu_us_per_message"] = round(live_cpu / messages * 1e6, 1)
    log(
        f"latency, {count} followers: p50 {rep['p50_ms']} ms, p99 {rep['p99_ms']} ms, "
        f"max {rep['max_ms']} ms; complete {rep['followers_complete']}/{count} "
        f"(load {load[0]:.2f})"
    )
    return rep


async def idle_rep(
    stack: Stack, *, count: int, live: int = 0, rate_per_s: float = 20.0, seconds: float = 10.0
) -> dict[str, Any]:
    """``count`` followers of a run that emits nothing yet: the API's memory for them.

    With ``live``: while they are held, ``live`` followers of a ticking run, in a
    second client process, and their delivery latency among the idle ones.
    """
    load = harness.load_average()
    run_id = await create(stack, "bench.ticks", {"count": 1, "rate_per_s": 1})
    api_pid = stack.api_pids[0]
    before = rss_mb(api_pid)
    with followers(stack, run_id, count, count) as procs:
        attach_s = await wait_attached(stack, count, procs)
        cpu_before = cpu_snapshot(stack)["api"]
        await asyncio.sleep(IDLE_HOLD_S)  # what holding them costs: keep-alives only
        held = {
            "api_rss_mb": rss_mb(api_pid),
            "client_rss_mb": rss_mb(procs[0][0].pid),
            "api_cpu_s_idle": round(cpu_snapshot(stack)["api"] - cpu_before, 2),
        }
        among = await live_among(stack, count, live, rate_per_s, seconds) if live else {}
        await go(stack, run_id)  # one tick and the terminal event, to every follower
        found = await collect(procs, FINISH_GRACE_S)
    rep = {
        "idle_followers": count,
        "load_before": load,
        "attach_s": round(attach_s, 2),
        "api_rss_before_mb": before,
        **held,
        "api_kib_per_follower": round((held["api_rss_mb"] - before) * 1024 / count, 1),
        "hold_s": IDLE_HOLD_S,
        **completeness(found, 1),
        "live": among,
    }
    log(
        f"idle, {count} followers: API RSS {before} -> {held['api_rss_mb']} MiB "
        f"({rep['api_kib_per_follower']} KiB each), attached in {rep['attach_s']} s, "
        f"complete {rep['followers_complete']}/{count} (load {load[0]:.2f})"
    )
    return rep


async def live_among(
    stack: Stack, idle: int, count: int, rate_per_s: float, seconds: float
) -> dict[str, Any]:
    """``count`` followers of a ticking run while ``idle`` others are held: their latency."""
    load = harness.load_average()
    ticking = await tick(stack, count, count, rate_per_s, seconds, attached_already=idle)
    among = {
        "followers": count,
        "load_before": load,
        "ticks": ticking.ticks,
        "rate_per_s": rate_per_s,
        **distribution(ticking.latencies_s),
        "emit_to_append": distribution(await append_delays(stack, ticking.run_id)),
        **completeness(ticking.found, ticking.ticks),
        "api_cpu_s": round(ticking.cpu_after["api"] - ticking.cpu_before["api"], 2),
        "client_cpu_s": ticking.found["client_cpu_s"],
    }
    log(
        f"live among {idle} idle, {count} followers: p50 {among['p50_ms']} ms, "
        f"p99 {among['p99_ms']} ms, max {among['max_ms']} ms; "
        f"complete {among['followers_complete']}/{count} (load {load[0]:.2f})"
    )
    return among


async def run_output(stack: Stack, run_id: str) -> dict[str, Any]:
    """The finished run's record (status and output) from the API."""
    response = await stack.http.get(f"/runs/{run_id}")
    response.raise_for_status()
    run: dict[str, Any] = response.json()
    return run


async def terminal_append_at(stack: Stack, run_id: str) -> float:
    """When the run's last event (the terminal one) was appended: its stream id, epoch s."""
    _, newest = await stack.bench.store.stream_bounds(run_id)
    assert newest is not None, "a finished run has events"
    return int(newest.split("-")[0]) / 1000


async def tokens_rep(stack: Stack, *, count: int) -> dict[str, Any]:
    """One repetition: one follower of a ``bench.tokens`` run of ``count`` events."""
    load = harness.load_average()
    run_id = await create(stack, "bench.tokens", {"count": count})
    with followers(stack, run_id, 1, 1) as procs:
        await wait_attached(stack, 1, procs)
        before = cpu_snapshot(stack)
        await go(stack, run_id)
        found = await collect(procs, FINISH_GRACE_S)
        after = cpu_snapshot(stack)
    run = await run_output(stack, run_id)
    output = run["output"] or {}
    seen = found["followers"][0]
    first_emit, last_seen = output.get("first_emit_at"), seen["last_at"]
    appended = await terminal_append_at(stack, run_id)
    rep = {
        "tokens": count,
        "load_before": load,
        "status": run["status"],
        "emit_loop_s": round(output.get("emit_loop_s", float("nan")), 3),
        "emitted_per_s": round(count / output["emit_loop_s"]) if output else None,
        "written_per_s": round(count / (appended - first_emit)) if first_emit else None,
        "received_per_s": _rate(count, seen["first_at"], last_seen),
        "end_to_end_s": round(last_seen - first_emit, 3) if first_emit and last_seen else None,
        **completeness(found, count),
        "api_cpu_s": round(after["api"] - before["api"], 2),
        "worker_cpu_s": round(after["worker"] - before["worker"], 2),
        "client_cpu_s": found["client_cpu_s"],
    }
    log(
        f"tokens: emitted {rep['emitted_per_s']}/s, written {rep['written_per_s']}/s, "
        f"received {rep['received_per_s']}/s, end to end {rep['end_to_end_s']} s; "
        f"complete {rep['followers_complete']}/1 (load {load[0]:.2f})"
    )
    return rep


def _rate(count: int, first: float | None, last: float | None) -> float | None:
    if first is None or last is None or last <= first:
        return None
    return round((count - 1) / (last - first))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults are what BENCHMARKS.md reports."""
    parser = argparse.ArgumentParser(prog="python -m bench.sse", description=__doc__)
    parser.add_argument("--followers", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--per-process", type=int, default=250, help="followers per client")
    parser.add_argument(
        "--api-processes",
        type=int,
        default=1,
        help="API replicas; client processes are spread over them round-robin",
    )
    parser.add_argument(
        "--pin", action="store_true", help="API processes on core 0, client processes on core 1"
    )
    parser.add_argument(
        "--idle", type=int, default=0, help="also hold this many idle followers (one client)"
    )
    parser.add_argument(
        "--live",
        type=int,
        default=0,
        help="with --idle: this many followers of a ticking run among the idle ones",
    )
    parser.add_argument("--client", choices=["protocol", "httpx"], default="protocol")
    parser.add_argument("--rate", type=float, default=20.0, help="tick events per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long ticks are emitted")
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument(
        "--events-maxlen",
        type=int,
        default=0,
        help="the stream cap; default: the tokens run fits (a follower behind the cap "
        "gets a replay_unavailable notice instead of the trimmed events)",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=0.0,
        help="before each measurement, wait (up to 2 min) for the 1-minute load average "
        "to drop to this; 0: do not wait",
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["latency", "tokens"])
    parser.add_argument("--label", default="", help="free text stored with the results")
    return parser.parse_args(argv)


async def quiet(max_load: float) -> None:
    """Wait until the 1-minute load average is at most ``max_load`` (0: don't), 2 min at most.

    The machine is shared: a measurement taken while someone else's tests run says
    more about them than about us. Each result keeps the load it started at.
    """
    deadline = time.monotonic() + QUIET_WAIT_S
    while max_load and harness.load_average()[0] > max_load:
        if time.monotonic() > deadline:
            log(f"load still {harness.load_average()[0]:.2f} > {max_load}: measuring anyway")
            return
        await asyncio.sleep(5)


async def run_all(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement asked for: latency per follower count, then tokens."""
    result: dict[str, Any] = {"latency": [], "tokens": [], "idle": []}
    for rep in range(args.reps):
        if args.idle:
            await quiet(args.quiet_load)
            log(f"rep {rep + 1}/{args.reps}: {args.idle} idle followers")
            result["idle"].append(
                await idle_rep(
                    stack,
                    count=args.idle,
                    live=args.live,
                    rate_per_s=args.rate,
                    seconds=args.seconds,
                )
            )
        if "latency" not in args.skip:
            for count in args.followers:
                await quiet(args.quiet_load)
                log(f"rep {rep + 1}/{args.reps}: latency with {count} followers")
                result["latency"].append(
                    await latency_rep(
                        stack,
                        count=count,
                        per_process=args.per_process,
                        rate_per_s=args.rate,
                        seconds=args.seconds,
                    )
                )
        if "tokens" not in args.skip:
            await quiet(args.quiet_load)
            log(f"rep {rep + 1}/{args.reps}: {args.tokens} tokens")
            result["tokens"].append(await tokens_rep(stack, count=args.tokens))
    return result


def print_report(result: dict[str, Any]) -> None:
    """The result as two small tables on stdout."""
    print(
        "followers  load  p50 ms  p99 ms  max ms  complete   api µs/msg  (live)  client µs/msg"
        "  (live)  first p99 ms  spread p99 ms"
    )
    for rep in result["latency"]:
        ticks = rep["per_tick"]
        print(
            f"{rep['followers']:>9}  {rep['load_before'][0]:4.2f}  {rep['p50_ms']:6.2f}  "
            f"{rep['p99_ms']:6.2f}  {rep['max_ms']:6.1f}  "
            f"{rep['followers_complete']:>4}/{rep['followers']:<4}  "
            f"{rep['api_cpu_us_per_message']:10.1f}  {rep['api_live_cpu_us_per_message']:6.1f}"
            f"  {rep['client_cpu_us_per_message']:12.1f}"
            f"  {rep['client_live_cpu_us_per_message']:6.1f}  "
            f"{ticks['first']['p99_ms']:12.2f}  {ticks['spread']['p99_ms']:13.2f}"
        )
    for rep in result["idle"]:
        print(
            f"idle {rep['idle_followers']}  load {rep['load_before'][0]:4.2f}  API RSS "
            f"{rep['api_rss_before_mb']} -> {rep['api_rss_mb']} MiB "
            f"({rep['api_kib_per_follower']} KiB each), client RSS {rep['client_rss_mb']} MiB, "
            f"API CPU idle {rep['api_cpu_s_idle']} s / {rep['hold_s']} s, "
            f"complete {rep['followers_complete']}/{rep['idle_followers']}"
        )
        if live := rep["live"]:
            print(
                f"  + {live['followers']} live at {live['rate_per_s']} ev/s: p50 "
                f"{live['p50_ms']} ms, p99 {live['p99_ms']} ms, max {live['max_ms']} ms, "
                f"complete {live['followers_complete']}/{live['followers']}"
            )
    print("tokens  load  emitted/s  written/s  received/s  end-to-end s  complete")
    for rep in result["tokens"]:
        print(
            f"{rep['tokens']:>6}  {rep['load_before'][0]:4.2f}  {rep['emitted_per_s']!s:>9}  "
            f"{rep['written_per_s']!s:>9}  {rep['received_per_s']!s:>10}  "
            f"{rep['end_to_end_s']!s:>12}  {rep['followers_complete']}/1"
        )


async def main(argv: list[str] | None = None) -> None:
    """Start a private redis-server, the API and a worker; measure; print; record."""
    args = parse_args(argv)
    fd_limit = raise_fd_limit(args.idle + args.live + max(args.followers))
    async with harness.private_redis("bench-sse") as redis_server:
        settings = Settings(redis_url=redis_server.url)  # the defaults a user gets
        store = RunStore.for_settings(redis_server.client, Scripts(), settings)
        bench = Bench(redis_server.url, redis_server.client, store)
        maxlen = args.events_maxlen or max(settings.events_maxlen, args.tokens)
        result = {"benchmark": "sse", **await harness.header(redis_server.client, args.label)}
        result |= {
            "client": args.client,
            "events_maxlen": maxlen,
            "api_processes": args.api_processes,
            "pinned": args.pin,
            "fd_limit": fd_limit,
        }
        async with stack(
            bench,
            redis_server.data_dir,
            client=args.client,
            events_maxlen=maxlen,
            api_processes=args.api_processes,
            pinned=args.pin,
            max_followers=args.idle + args.live,
        ) as running:
            result |= await run_all(running, args)
    path = harness.record(result)
    print_report(result)
    log(f"results appended to {path}")


if __name__ == "__main__":
    asyncio.run(main())
