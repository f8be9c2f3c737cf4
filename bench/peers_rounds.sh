#!/usr/bin/env bash
# Leasehold beside BullMQ in the peers' harness, alternated, in the same minutes (issue 19).
#
# Usage: bench/peers_rounds.sh HARNESS [ROUNDS [LATENCY_PAIRS]]
#   HARNESS: a copy of ../shared/bench-peers after `./run_all.sh setup`, with this checkout
#   installed in its venv (`.venv/bin/pip install -e CHECKOUT`).
# Each round: throughput n=20,000 then n=5,000 (3 repetitions each, BullMQ first), then one
# latency pair (50 jobs/s for 10 s); then LATENCY_PAIRS more latency pairs. BullMQ gets its own
# redis-server on port 7411, Leasehold its own (--own-redis) on 7412. Results append to
# HARNESS/out/results.jsonl; `python3 bench/peers_results.py HARNESS/out/results.jsonl` prints them.
set -euo pipefail
cd "$1"
rounds=${2:-2}
pairs=${3:-4}
mkdir -p out/logs
PY=.venv/bin/python
bullmq() {
  $PY redisctl.py start 7411 >/dev/null
  (cd bullmq && node bench.js "$@" --mode default --port 7411 >/dev/null 2>>../out/logs/driver-bullmq.log)
  $PY redisctl.py stop 7411
}
leasehold() {
  $PY bench.py leasehold "$@" --mode default --port 7412 --own-redis >/dev/null 2>>out/logs/driver-leasehold.log
}
load() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
for _ in $(seq "$rounds"); do
  load
  for n in 20000 5000; do
    bullmq throughput -n "$n" --reps 3
    leasehold throughput -n "$n" --reps 3
  done
  bullmq latency --rate 50 --seconds 10
  leasehold latency --rate 50 --seconds 10
done
for _ in $(seq "$pairs"); do
  load
  bullmq latency --rate 50 --seconds 10
  leasehold latency --rate 50 --seconds 10
done
load
