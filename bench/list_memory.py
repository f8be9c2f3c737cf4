"""What listing runs costs the API's memory: ``GET /runs?limit=500`` over runs with 1 MB inputs.

``python -m bench.list_memory [--runs 200] [--input-bytes 1000000]`` starts its own
redis-server and one API process (``leasehold api``), creates the runs through
``POST /runs``, then for each listing below resets the API's peak RSS
(``/proc/<pid>/clear_refs``, 5) and reads it back (``VmHWM``) after the request:

* ``summaries``: ``GET /runs?limit=500`` (what a console or ``runs list`` sends);
* ``filtered``: the same with ``status=succeeded`` (matches nothing here);
* ``include=input``: the large field too, within ``LEASEHOLD_LIST_MAX_BYTES``.

``--api-root DIR`` runs the API from another checkout (e.g. ``git archive`` of an
older commit), to measure the code before a change with the same client. Linux
only (``/proc``). One JSON line goes to ``bench/out/results.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from app.stack.embedded import free_port
from bench.harness import LOG_DIR, header, log, private_redis, record, stop

MIB = 1024 * 1024
LISTINGS = {
    "summaries": {"limit": 500},
    "filtered": {"limit": 500, "status": "succeeded"},
    "include=input": {"limit": 500, "include": "input"},
}


def rss_kib(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def reset_peak(pid: int) -> None:
    """Start a new peak-RSS window for the process (Linux: clear_refs 5 resets VmHWM)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def spawn_api(root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m app.cli api`` from ``root`` (this checkout or an older one)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}
    with (LOG_DIR / "list-memory-api.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api"],
            cwd=root,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def wait_ready(http: httpx.AsyncClient, proc: subprocess.Popen[bytes]) -> None:
    """Poll /healthz until the API answers (or fail if it died)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the API exited; see bench/out/logs/list-memory-api.log")
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the API did not become healthy in 60 s")


async def measure(http: httpx.AsyncClient, pid: int, params: dict[str, Any]) -> dict[str, Any]:
    """One listing: the API's RSS before, its peak during, and what the response held."""
    before_kib = rss_kib(pid, "VmRSS")
    reset_peak(pid)
    started = time.perf_counter()
    response = await http.get("/runs", params=params)
    elapsed_s = time.perf_counter() - started
    response.raise_for_status()
    peak_kib = rss_kib(pid, "VmHWM")
    return {
        "rss_before_mib": round(before_kib / 1024, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "growth_mib": round((peak_kib - before_kib) / 1024, 1),
        "items": len(response.json()["items"]),
        "response_bytes": len(response.content),
        "seconds": round(elapsed_s, 3),
    }


async def main(args: argparse.Namespace) -> None:
    """Create the runs, list them each way, print and record the figures."""
    async with private_redis("list-memory") as redis:
        port = free_port()
        env = {
            "LEASEHOLD_REDIS_URL": redis.url,
            "LEASEHOLD_API_PORT": str(port),
            "LEASEHOLD_HANDLERS": "app.demo",
            "LEASEHOLD_MAX_INPUT_BYTES": str(args.input_bytes + 1024),
            "LEASEHOLD_LOG_LEVEL": "WARNING",
        }
        proc = spawn_api(args.api_root, env)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as http:
                await wait_ready(http, proc)
                blob = "x" * args.input_bytes
                log(f"creating {args.runs} runs with {args.input_bytes} B inputs")
                for _ in range(args.runs):
                    body = {"handler": "demo.echo", "input": {"message": blob}}
                    (await http.post("/runs", json=body)).raise_for_status()
                await http.get("/runs", params={"limit": 1})  # warm the route
                results = {}
                for name, params in LISTINGS.items():
                    results[name] = await measure(http, proc.pid, params)
                    log(name, results[name])
        finally:
            stop(proc)
        result = {
            **(await header(redis.client, args.label)),
            "bench": "list_memory",
            "runs": args.runs,
            "input_bytes": args.input_bytes,
            "api_root": str(args.api_root),
            "listings": results,
        }
    path = record(result)
    columns = ("RSS before", "peak", "growth", "items", "bytes")
    print(f"{'listing':<16} " + " ".join(f"{name:>11}" for name in columns))
    for name, row in results.items():
        print(
            f"{name:<16} {row['rss_before_mib']:>9} M {row['peak_rss_mib']:>9} M "
            f"{row['growth_mib']:>9} M {row['items']:>11} {row['response_bytes']:>11}"
        )
    log(f"recorded in {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--input-bytes", type=int, default=1_000_000)
    parser.add_argument("--api-root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--label", default="list-memory")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
