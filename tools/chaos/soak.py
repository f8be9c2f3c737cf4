"""``make soak DURATION=<s> SEED=<n>``: a chaos run of any length, outside pytest.

Prints the summary and writes it to ``bench/out/chaos/`` (``--out`` elsewhere),
keeps every process log under ``--work-dir`` (a temp dir by default, removed
only when the run found no violation), and exits 1 when any invariant was
violated.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from tools.chaos.cluster import REPO_ROOT
from tools.chaos.scenario import ChaosConfig, run_chaos

DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "chaos"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The soak's command line."""
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.soak", description=__doc__)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=1, help="seeds the workload and faults")
    parser.add_argument("--rate", type=float, default=2.5, help="runs created per second")
    parser.add_argument("--lanes", type=int, default=2, help="faults under way at once")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the summary goes")
    parser.add_argument("--work-dir", type=Path, default=None, help="logs, AOF, side channel")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 when every invariant held."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="leasehold-soak-"))
    config = ChaosConfig(
        duration_s=args.duration,
        seed=args.seed,
        work_dir=work_dir,
        rate_per_s=args.rate,
        lanes=args.lanes,
    )
    report = asyncio.run(run_chaos(config))
    print(report.text())
    json_path, _ = report.write(args.out, f"soak-{args.seed}-{int(args.duration)}s")
    print(f"summary written to {json_path}")
    if report.violations:
        print(f"process logs kept in {work_dir}", file=sys.stderr)
        return 1
    if args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
