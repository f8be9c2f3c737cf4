"""Print the peers' harness results (``out/results.jsonl``) one line per measurement.

``python3 bench/peers_results.py HARNESS/out/results.jsonl``: for throughput, jobs/s end to
end, steady state and spawn → first progress of each repetition; for latency, p50 / p99 /
max. The tables of BENCHMARKS.md's issue 19 sections are read off this, so a reader can
check them against the raw file.
"""

from __future__ import annotations

import json
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


def main() -> None:
    """Print every line of the results file given."""
    with open(sys.argv[1]) as results:
        for line in results:
            print(describe(json.loads(line)))


if __name__ == "__main__":
    main()
