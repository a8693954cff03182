#!/usr/bin/env bash
# The cost of wait_replicas on PUBLISH throughput: one redis-server master with one replica, and
# two deferq instances on it, one with wait_replicas = 0 (the reference) and one with
# wait_replicas = 1 (every batch of writes on a connection followed by one WAIT 1 1000).
#
#   redis-benchmark -c 50 -P D -n N  PUBLISH bench_wX <64-byte payload>   (D = 1 and 32)
#
# Three runs per figure, interleaved (the order alternates); medians, and the ratio
# wait1/wait0 per depth. Redis (master and replica) runs on core 1, deferq and the benchmark
# client on core 0 (taskset), as the other benchmarks do; the machine is shared, so read the
# ratios, not the absolute numbers.
#
# Environment:
#   DEFERQ_BIN            deferq binary (default: build/src/deferq, built with ninja when missing)
#   BENCH_JOBS            publishes per run at depth 1 (default 50000)
#   BENCH_JOBS_PIPELINED  publishes per run at depth 32 (default 300000)
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
jobs_p1=${BENCH_JOBS:-50000}
jobs_p32=${BENCH_JOBS_PIPELINED:-300000}
runs=3
clients=50

for tool in redis-benchmark redis-cli redis-server taskset; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-wait

redis_args=(--bind 127.0.0.1 --save "" --appendonly no --repl-diskless-sync-delay 0 --dir "$workdir")
start_server master taskset -c 1 redis-server "${redis_args[@]}"
master=$started_port
start_server replica taskset -c 1 redis-server "${redis_args[@]}" --replicaof 127.0.0.1 "$master"
replica=$started_port
for ((i = 0; i < 200; i++)); do
  [[ $(redis-cli -p "$replica" INFO replication | tr -d '\r' | grep '^master_link_status:') == \
    master_link_status:up ]] && break
  sleep 0.05
done

declare -A dq
for w in 0 1; do
  printf '[pools.default]\naddr = "redis://127.0.0.1:%s"\nwait_replicas = %s\n' "$master" "$w" \
    >"$workdir/w$w.toml"
  start_server "deferq-w$w" taskset -c 0 "$deferq_bin" --threads 1 --config "$workdir/w$w.toml"
  dq[$w]=$started_port
done

payload=$(head -c 64 /dev/zero | tr '\0' x)
declare -A results
median() { printf '%s\n' "$@" | sort -g | sed -n "$(((${#} + 1) / 2))p"; }

for depth in 1 32; do
  n=$jobs_p1
  [[ $depth == 32 ]] && n=$jobs_p32
  for ((run = 0; run < runs; run++)); do
    order="0 1"
    ((run % 2)) && order="1 0"
    for w in $order; do
      rps=$(taskset -c 0 redis-benchmark -p "${dq[$w]}" -c "$clients" -P "$depth" -n "$n" --csv \
        PUBLISH "bench_w$w" "$payload" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
      results[$depth,$w]+="$rps "
    done
  done
done

waits=$(redis-cli -p "$master" INFO commandstats | tr -d '\r' | grep '^cmdstat_wait:' |
  sed 's/^cmdstat_wait:calls=\([0-9]*\).*/\1/')
printf '\nPUBLISH/s, %d clients, median of %d runs (raw runs in brackets)\n' "$clients" "$runs"
printf '%-6s %-34s %-34s %s\n' depth "wait_replicas=0" "wait_replicas=1" "ratio 1/0"
for depth in 1 32; do
  # shellcheck disable=SC2086
  m0=$(median ${results[$depth,0]})
  # shellcheck disable=SC2086
  m1=$(median ${results[$depth,1]})
  printf '%-6s %-34s %-34s %.2f\n' "-P $depth" "$m0 [${results[$depth,0]% }]" \
    "$m1 [${results[$depth,1]% }]" "$(echo "$m1 / $m0" | bc -l)"
done
printf 'WAITs run by the master: %s (for %s acknowledged publishes with wait_replicas=1)\n' \
  "${waits:-0}" "$(redis-cli -p "${dq[1]}" QSTAT bench_w1 | sed -n 2p)"
