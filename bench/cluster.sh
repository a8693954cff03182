#!/usr/bin/env bash
# deferq on a 3-master Redis Cluster against deferq on one redis-server, measured in the same run
# (issue 12 item 3; the figures are in docs/operations.md, "Running against a Redis Cluster"), and one
# 8-shard queue against a 1-shard queue on the cluster.
#
# Both setups run side by side for the whole benchmark: one redis-server, and a cluster of three
# masters without replicas (redis-cli --cluster create, tests/lib/dqtest/cluster.py), each with
# its own deferq (1 thread). Every redis-server is pinned to core SERVER_CPU (default 1), deferq
# and the load generators to CLIENT_CPU (default 0): on a 2-core machine the three masters share
# one core, so the cluster cannot be faster here; what the figures show is the cost of the
# cluster client (routing, per-node connections, per-slot keys). Runs interleave the setups
# (the order alternates), RUNS (3) of each; the table gives medians and the cluster/single ratio.
#
#   publish       redis-benchmark -c 50 -P 16 -n PUBLISH_JOBS (100,000) PUBLISH q__rand_int__
#                 <64 bytes> with -r QUEUES (200): jobs spread over 200 queues, on all masters
#   consume+ack   8 connections CONSUME <their 25 queues> TTR 120 COUNT 50, then one ACK per queue
#                 of the batch (pipelined), until the PUBLISH_JOBS jobs are ACKed
#   lateness      bench/lateness (the tool of bench/lateness/run.sh): LATENESS_JOBS (5,000) jobs,
#                 PDELAY uniform in [1000, 5000) ms, one queue, p50/p99/max ms and missing jobs
#   idle          IDLE_QUEUES (2,000) queues holding one job due in an hour: CPU of deferq and of
#                 all Redis processes over 10 s (% of one core); on the cluster this is the pump
#                 owner's per-slot due-index reads and the slot discovery
#
#   shards        on the cluster only: one queue of 8 shards ([shards.default] hot8 = 8, its
#                 shards on the three masters) against one unsharded queue: publish (redis-benchmark
#                 -c 50 -P 16, SHARD_JOBS (50,000) jobs) and consume+ack (8 connections CONSUME
#                 <queue> COUNT 50, ACK), RUNS runs alternating, medians and the 8/1 ratio.
#                 BENCH_ONLY=shards runs this part alone.
#
# Environment: DEFERQ_BUILD (default build), DEFERQ_BIN, LATENESS_BIN, RUNS, PUBLISH_JOBS, QUEUES,
# LATENESS_JOBS, IDLE_QUEUES, SHARD_JOBS, BENCH_ONLY, CLIENT_CPU, SERVER_CPU.
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DEFERQ_BUILD:-$repo/build}
deferq_bin=${DEFERQ_BIN:-$build/src/deferq}
lateness_bin=${LATENESS_BIN:-$build/bench/lateness}

for tool in redis-server redis-cli redis-benchmark taskset /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
for bin in "$deferq_bin" "$lateness_bin"; do
  [[ -x $bin ]] || { echo "$bin is missing: build with scripts/build" >&2; exit 1; }
done
exec /usr/bin/python3 "$repo/bench/cluster.py" "$deferq_bin" "$lateness_bin"
