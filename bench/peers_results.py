"""Print the peers' harness results (``out/results.jsonl``) one line per measurement.

``python3 bench/peers_results.py HARNESS/out/results.jsonl``: for throughput, jobs/s end to
end, steady state and spawn → first progress of each repetition; for latency, p50 / p99 /
max. The tables of BENCHMARKS.md's issue 19 sections are read off this, so a reader can
check them against the raw file. ``--ratios`` adds Leasehold's medians over BullMQ's, per
test (what aim 1 asks: at or above 1.0), read from the same file.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


def describe(result: dict[str, Any]) -> str:
    """One measurement as a line: the figures the BENCHMARKS tables quote."""
    peer, test = result.get("peer"), result.get("test")
    reps = result.get("reps")
    if isinstance(reps, list):
        figures = {
            "jobs/s": [rep.get("jobs_per_s") for rep in reps],
            "steady": [rep.get("steady_jobs_per_s") for rep in reps],
            "first s": [rep.get("t_first_progress_s") for rep in reps],
        }
        return f"{peer} {test} n={result.get('n')} {figures}"
    latency = {key: result.get(key) for key in ("p50_ms", "p99_ms", "max_ms")}
    return f"{peer} {test} {latency}"


def ratios(results: list[dict[str, Any]]) -> list[str]:
    """Leasehold's median over BullMQ's, per throughput test and figure, as lines.

    Every repetition of a test in the file counts (several rounds: their reps pooled).
    """
    values: dict[tuple[Any, ...], list[float]] = {}
    for result in results:
        reps = result.get("reps")
        if not isinstance(reps, list):
            continue
        for figure in ("jobs_per_s", "steady_jobs_per_s"):
            key = (result.get("peer"), result.get("n"), figure)
            values.setdefault(key, []).extend(rep[figure] for rep in reps if rep.get(figure))
    medians = {key: statistics.median(found) for key, found in values.items() if found}
    lines = []
    for (peer, n, figure), ours in sorted(medians.items(), key=str):
        theirs = medians.get(("bullmq", n, figure))
        if peer == "leasehold" and theirs:
            lines.append(f"leasehold / bullmq n={n} {figure}: {ours / theirs:.2f}")
    return lines


def main() -> None:
    """Print every line of the results file given (and the ratios, with ``--ratios``)."""
    with open(sys.argv[1]) as results:
        parsed = [json.loads(line) for line in results]
    for result in parsed:
        print(describe(result))
    if "--ratios" in sys.argv[2:]:
        print("\n".join(ratios(parsed)))


if __name__ == "__main__":
    main()
