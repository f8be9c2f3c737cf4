"""Prints one benchmark result (as appended to ``bench/out/results.jsonl``) as tables."""

from __future__ import annotations

from typing import Any

TARGET_RUNS_PER_S = 4000
TARGET_P50_MS = 2.0
TARGET_ROUND_TRIPS = 3.0


def _row(cells: list[object], widths: list[int]) -> str:
    return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True))


def _table(header: list[str], rows: list[list[object]]) -> None:
    everything: list[list[object]] = [list(header), *rows]
    widths = [max(len(str(row[i])) for row in everything) for i in range(len(header))]
    print(_row(list(header), widths))
    print(_row(["-" * width for width in widths], widths))
    for row in rows:
        print(_row(row, widths))
    print()


def _throughput(results: list[dict[str, Any]]) -> None:
    header = [
        "mode",
        "n",
        "runs/s median (range)",
        "steady runs/s",
        "enqueue runs/s",
        "round trips/run",
        "scripts/run",
        "commands/run",
        "worker CPU us/run",
        "redis CPU us/run",
    ]
    rows: list[list[object]] = [
        [
            res["mode"],
            res["n"],
            f"{res['median_runs_per_s']} ({res['min_runs_per_s']}-{res['max_runs_per_s']})",
            res["median_steady_runs_per_s"],
            res["median_enqueue_runs_per_s"],
            res["median_round_trips_per_run"],
            res["median_scripts_per_run"],
            res["median_commands_per_run"],
            res["median_worker_cpu_us_per_run"],
            res["median_redis_cpu_us_per_run"],
        ]
        for res in results
    ]
    _table(header, rows)


def _latency(res: dict[str, Any]) -> None:
    _table(
        ["rate/s", "received", "p50 ms", "p99 ms", "max ms", "worker round trips/run"],
        [
            [
                res["rate"],
                f"{res['received']}/{res['sent']}",
                res["p50_ms"],
                res["p99_ms"],
                res["max_ms"],
                res.get("worker_round_trips_per_run"),
            ]
        ],
    )


def _heartbeat(res: dict[str, Any]) -> None:
    _table(
        [
            "leases",
            "TTL/3 s",
            "renew calls/period",
            "evalsha/period",
            "commands/period",
            "renew server ms",
            "renew RTT ms (median)",
        ],
        [
            [
                res["leases_held"],
                res["renew_interval_s"],
                res["renew_calls_per_period"],
                res["evalsha_per_period"],
                res["commands_per_period"],
                ", ".join(str(ms) for ms in res["renew_server_ms"]),
                res["renew_client_round_trip_median_ms"],
            ]
        ],
    )
    print(f"evalsha by script in the window: {res['evalsha_by_script']}\n")


def _targets(result: dict[str, Any]) -> None:
    best = max((r["median_runs_per_s"] or 0 for r in result["throughput"]), default=0)
    trips = max((r["median_round_trips_per_run"] for r in result["throughput"]), default=0)
    lines = [f"throughput {best} runs/s (target >= {TARGET_RUNS_PER_S})"]
    if result["throughput"]:
        lines.append(f"round trips/run <= {trips} (target <= {TARGET_ROUND_TRIPS})")
    if "latency" in result:
        lines.append(f"p50 {result['latency']['p50_ms']} ms (target <= {TARGET_P50_MS})")
    print("targets: " + "; ".join(lines))


def print_report(result: dict[str, Any]) -> None:
    """Throughput, latency and heartbeat tables, then the targets of issue 2."""
    machine = result["machine"]
    print(
        f"\nLeasehold bench {result['when']} {result['label']}: {machine['nproc']} x "
        f"{machine['cpu_model']}, Python {machine['python']}, Redis {machine['redis']}, "
        f"load at start {result['load_at_start']}\n"
    )
    if result["throughput"]:
        _throughput(result["throughput"])
    if "latency" in result:
        _latency(result["latency"])
    if "heartbeat" in result:
        _heartbeat(result["heartbeat"])
    _targets(result)
