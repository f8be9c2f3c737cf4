#!/usr/bin/env bash
# Two Leasehold trees beside BullMQ, block by block, in the same minutes (issue 19).
#
# Usage: bench/peers_ab.sh HARNESS OLD_TREE NEW_TREE [BLOCKS [LATENCY_PAIRS]]
#   HARNESS: a copy of ../shared/bench-peers after `./run_all.sh setup` (see peers_rounds.sh).
#   OLD_TREE, NEW_TREE: checkouts (e.g. `git worktree add /tmp/before <commit>` and this one).
# Each block installs one tree in the harness venv (`pip install --no-deps -e`), runs one
# round of bench/peers_rounds.sh and LATENCY_PAIRS (default 2) more latency pairs, and
# prints that block's lines and ratios (bench/peers_results.py --ratios). Blocks alternate
# NEW, OLD, NEW, OLD... (BLOCKS, default 4), so a change of the machine's speed hits both
# trees alike. Each block's raw results are kept as HARNESS/out/ab-<block>-<tree>.jsonl;
# NEW_TREE is installed again at the end.
set -euo pipefail
harness=$(cd "$1" && pwd)
old=$(cd "$2" && pwd)
new=$(cd "$3" && pwd)
blocks=${4:-4}
pairs=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
install() { "$harness/.venv/bin/pip" install -q --no-deps -e "$1" >/dev/null; }
for block in $(seq "$blocks"); do
  if (( block % 2 )); then tree=$new; else tree=$old; fi
  install "$tree"
  rm -f "$harness/out/results.jsonl"
  echo "=== block $block: $tree, $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$here/peers_rounds.sh" "$harness" 1 "$pairs" >/dev/null
  python3 "$here/peers_results.py" "$harness/out/results.jsonl" --ratios
  cp "$harness/out/results.jsonl" "$harness/out/ab-$block-$(basename "$tree").jsonl"
done
install "$new"
echo "=== done $(date +%T)"
