"""Fill Redis on purpose: the issue-13 reproduction, with figures.

``python -m bench.redis_full [--creates 3000] [--maxmemory 8mb] [--root DIR]``
starts its own redis-server with ``--maxmemory <maxmemory>`` (``noeviction``),
one ``leasehold api`` and one ``leasehold worker``, then sends a stream of
``POST /runs`` from 8 clients, alternating ``demo.sleep`` 3 s and 20 KB
``demo.echo`` runs, as the operator in the issue did. It then waits until no
run is running any more and reports:

* every answer of the API by status and problem ``type`` (a 500 is a failure);
* whether Redis itself refused anything before the first 503 (INFO errorstats);
* what became of the created runs: succeeded with the output their handler
  returned (echo outputs are compared with their inputs), still queued (waiting
  for memory), anything else (lost: orphaned, failed);
* ``/readyz`` problems at the end, and the API log scanned for 500s/tracebacks.

``--root DIR`` runs the API and worker from another checkout (``git archive`` of
an older commit) to measure the code before a change. One JSON line goes to
``bench/out/results.jsonl``. It takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from app.stack import processes
from app.stack.embedded import free_port
from app.stack.processes import Child, child_env
from bench.harness import LOG_DIR, header, log, private_redis, record, stop

FILLER = "x" * 20_000
CLIENTS = 8
SETTLE_TIMEOUT_S = 60.0


def spawn(root: Path, name: str, args: list[str], env: dict[str, str]) -> Child:
    """``python -m app.cli <args>`` from ``root`` (this checkout or an older one)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"redis-full-{name}.log"
    log_path.write_bytes(b"")
    full_env = child_env(env, {"PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"})
    return processes.spawn(name, args, env=full_env, log_path=log_path, cwd=root)


def body(index: int) -> dict[str, Any]:
    """Odd: a 3 s sleep; even: a 20 KB echo whose output must equal its input."""
    if index % 2:
        return {"handler": "demo.sleep", "input": {"seconds": 3}}
    return {"handler": "demo.echo", "input": {"message": f"{index}:{FILLER}"}}


async def create_all(
    http: httpx.AsyncClient, total: int
) -> list[tuple[int, httpx.Response | None]]:
    """POST ``total`` runs from :data:`CLIENTS` concurrent clients; every answer, by index.

    None for a request that got no answer at all (the connection dropped).
    """
    answers: list[tuple[int, httpx.Response | None]] = []
    indexes = iter(range(total))

    async def client() -> None:
        for index in indexes:
            try:
                answers.append((index, await http.post("/runs", json=body(index))))
            except httpx.TransportError:
                answers.append((index, None))

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return answers


def kind(response: httpx.Response | None) -> str:
    """``201``, or ``503 admission-refused``-style: the status and the problem type."""
    if response is None:
        return "no answer"
    if response.status_code < 300:
        return str(response.status_code)
    try:
        problem = response.json().get("type", "")
    except ValueError:
        problem = ""
    return f"{response.status_code} {problem.rsplit('/', 1)[-1]}".strip()


async def settle(http: httpx.AsyncClient, run_ids: list[str]) -> dict[str, Any]:
    """Wait until no run runs and no status changed for 5 s (or the timeout); the runs then."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last: Counter[str] = Counter()
    stable_since = time.monotonic()
    while True:
        runs = {run_id: (await http.get(f"/runs/{run_id}")).json() for run_id in run_ids}
        now = Counter(run.get("status", "missing") for run in runs.values())
        if now != last:
            last, stable_since = now, time.monotonic()
        running = now["running"] + now["cancelling"]
        if (not running and time.monotonic() - stable_since >= 5) or time.monotonic() > deadline:
            return runs
        await asyncio.sleep(1)


def fates(created: dict[str, int], runs: dict[str, Any]) -> Counter[str]:
    """What became of each created run: right output, queued, or what else."""
    seen: Counter[str] = Counter()
    for run_id, index in created.items():
        run = runs[run_id]
        status = run.get("status", "missing")
        if status == "succeeded" and index % 2 == 0:
            expected = body(index)["input"]
            seen["succeeded, output = handler's" if run["output"] == expected else "WRONG"] += 1
        elif status == "succeeded":
            seen["succeeded, output = handler's" if "slept_s" in run["output"] else "WRONG"] += 1
        else:
            seen[status] += 1
    return seen


async def main(args: argparse.Namespace) -> None:
    """Start the stack on a small Redis, fill it, report."""
    async with private_redis("redis-full") as redis:
        await redis.client.config_set("maxmemory", args.maxmemory)
        port = free_port()
        env = {
            "LEASEHOLD_REDIS_URL": redis.url,
            "LEASEHOLD_API_PORT": str(port),
            "LEASEHOLD_HANDLERS": "app.demo",
            "LEASEHOLD_LOG_LEVEL": "WARNING",
        }
        api = spawn(args.root, "api", ["api"], env)
        worker = spawn(args.root, "worker", ["worker"], env)
        try:
            url = f"http://127.0.0.1:{port}"
            processes.wait_healthy(url, api, timeout_s=60)
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                started = time.monotonic()
                answers = await create_all(http, args.creates)
                create_s = time.monotonic() - started
                answers.sort(key=lambda pair: pair[0])
                first_refused = next((i for i, a in answers if kind(a) != "201"), None)
                oom_at_end = await oom_refusals(redis.client)
                created = {a.json()["id"]: i for i, a in answers if a and a.status_code == 201}
                log(f"{len(created)} created in {create_s:.1f}s; settling")
                runs = await settle(http, list(created))
                ready = (await http.get("/readyz")).json()
                oom_after_settle = await oom_refusals(redis.client)
        finally:
            stop(worker)
            stop(api)
        api_log = (LOG_DIR / "redis-full-api.log").read_text(errors="replace")
        result = {
            **(await header(redis.client, args.label)),
            "bench": "redis_full",
            "root": str(args.root),
            "maxmemory": args.maxmemory,
            "creates": args.creates,
            "answers": dict(Counter(kind(a) for _, a in answers)),
            "first_non_201_at": first_refused,
            "redis_oom_refusals_while_creating": oom_at_end,
            "redis_oom_refusals_after_settling": oom_after_settle,
            "runs": dict(fates(created, runs)),
            "readyz_problems": ready.get("problems", []),
            "api_log_500s": api_log.count(" 500 "),
            "api_log_tracebacks": api_log.count("Traceback"),
        }
    record(result)
    keys = ("answers", "first_non_201_at", "redis_oom_refusals_while_creating")
    for key in (*keys, "redis_oom_refusals_after_settling", "runs"):
        print(f"{key}: {result[key]}")
    print("readyz problems:", *result["readyz_problems"], sep="\n  ")
    print(f"API log: {result['api_log_500s']} x ' 500 ', {result['api_log_tracebacks']} tracebacks")


async def oom_refusals(client: Any) -> int:
    """Commands Redis refused with OOM since it started (INFO errorstats)."""
    entry = (await client.info("errorstats")).get("errorstat_OOM")
    return int(entry["count"]) if isinstance(entry, dict) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=3_000)
    parser.add_argument("--maxmemory", default="8mb")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--label", default="redis-full")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
