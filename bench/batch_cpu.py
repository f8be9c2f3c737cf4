"""CPU per run of ``POST /runs/batch`` inside one process: the API's own cost, without the machine.

``python -m bench.batch_cpu [--batch 1000] [--batches 8] [--phases]`` builds the
app (lifespan run) on a private redis-server, warms it with one batch, then
posts ``--batches`` batches of ``demo.echo`` runs (each with its own
idempotency key, every answer checked 201) through ``httpx.ASGITransport`` and
reports ``time.process_time()`` per run: the median and the minimum request.
The client's side (httpx, decoding the answer) is in the same process, so this
is an upper bound of the API's CPU. On a loaded shared machine the wall clock
of ``bench.bulk_create`` measures the machine; CPU time of one process, with
runs of two checkouts alternated, measures the code:

    d=$(mktemp -d); git archive <commit> | tar -x -C "$d"
    (cd "$d" && $OLDPWD/.venv/bin/python -m bench.batch_cpu)   # before
    .venv/bin/python -m bench.batch_cpu                          # after

``--phases`` also times the route's steps (item judging, script arguments,
building the created runs, the answer's JSON) by wrapping them. ``--direct``
calls the ASGI app itself with the encoded body (no httpx, the answer not
decoded, only its created items counted): the API's own CPU per run, the part a
``leasehold api`` process spends below uvicorn's HTTP parsing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.api.app import create_app
from app.api.routes import batch
from app.api.routes.batch_items import BatchJudge
from app.settings import Settings
from app.startup import settle
from app.store.runs import creating as runs
from app.store.runs.store import RunStore
from bench.harness import load_average, private_redis

PHASES: list[tuple[Any, str]] = [
    (BatchJudge, "judged"),
    (batch, "_items_json"),
    (RunStore, "create_group"),
    (runs, "_fresh"),
]


def timed_phases(spent: dict[str, float]) -> None:
    """Wrap each step of :data:`PHASES` so its CPU time adds up in ``spent``."""
    for owner, name in PHASES:
        step: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, _step: Callable[..., Any] = step, _name: str = name) -> Any:
            started = time.process_time()
            try:
                return _step(*args)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.process_time() - started

        setattr(owner, name, timed)


def body(size: int, tag: str) -> bytes:
    """One batch request, encoded before the clock starts."""
    items = [
        {"handler": "demo.echo", "input": {"message": f"run {i}"}, "idempotency_key": f"{tag}-{i}"}
        for i in range(size)
    ]
    return json.dumps({"items": items}).encode()


async def direct_post(app: Any, payload: bytes) -> tuple[int, bytes]:
    """POST /runs/batch by calling the ASGI app: (status, answer body), no HTTP client."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/runs/batch",
        "raw_path": b"/runs/batch",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("localhost", 80),
    }
    messages = [{"type": "http.request", "body": payload, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def main(args: argparse.Namespace) -> None:
    """Post the batches and print CPU per run (and per phase with ``--phases``)."""
    spent: dict[str, float] = {}
    if args.phases:
        timed_phases(spent)
    async with private_redis("batch-cpu") as redis:
        app = create_app(Settings(redis_url=redis.url, handlers=["app.demo"]))
        settle()  # as `leasehold api` does before it serves: the start-up heap is frozen
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=120
            ) as http:
                bodies = [
                    body(args.batch, f"b{i}-{time.time_ns()}") for i in range(args.batches + 1)
                ]
                per_run: list[float] = []
                load = load_average()
                for i, payload in enumerate(bodies):
                    if i == 1:
                        spent.clear()  # the warm-up batch is not counted
                    started = time.process_time()
                    if args.direct:
                        status, answer = await direct_post(app, payload)
                    else:
                        response = await http.post(
                            "/runs/batch",
                            content=payload,
                            headers={"content-type": "application/json"},
                        )
                        status, answer = response.status_code, response.content
                    cpu_s = time.process_time() - started
                    if status != 200 or answer.count(b'{"status":201,"run":{') != args.batch:
                        raise RuntimeError(f"HTTP {status}: {answer[:300]!r}")
                    if i:
                        per_run.append(cpu_s * 1e6 / args.batch)
    print(
        f"batch {args.batch} x {args.batches}: CPU per run median {statistics.median(per_run):.1f}"
        f" us, min {min(per_run):.1f} us (load before {load[0]:.2f})"
    )
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<14} {seconds * 1e6 / args.batch / args.batches:6.1f} us per run")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1000, help="runs per request")
    parser.add_argument("--batches", type=int, default=8, help="requests measured")
    parser.add_argument("--phases", action="store_true", help="also time the route's steps")
    parser.add_argument(
        "--direct", action="store_true", help="call the ASGI app without an HTTP client"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
