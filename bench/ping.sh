#!/usr/bin/env bash
# PING throughput of deferq against redis-server on the same machine, in the same run:
# redis-benchmark -t ping_mbulk -c 50 at pipeline depth 1 and 32, three runs per server,
# interleaved (deferq, redis, deferq, ...) so that a noisy neighbour hits both alike. Prints every
# run, the medians, and the ratio deferq/redis per depth. Machines are shared: read the ratio,
# not the absolute numbers.
#
# Environment:
#   DEFERQ_BIN                path of the deferq binary (default: build/src/deferq, built with
#                             ninja when missing)
#   DEFERQ_THREADS            deferq --threads (default 1: the same core budget as Redis; the
#                             other core runs redis-benchmark)
#   BENCH_REQUESTS            requests per run at depth 1 (default 200000)
#   BENCH_REQUESTS_PIPELINED  requests per run at depth 32 (default 4000000)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
deferq_threads=${DEFERQ_THREADS:-1}
requests=${BENCH_REQUESTS:-200000}
requests_pipelined=${BENCH_REQUESTS_PIPELINED:-4000000}
runs=3
clients=50

for tool in redis-benchmark redis-cli redis-server; do
  command -v "$tool" >/dev/null || { echo "$tool not found: install redis-tools/redis-server" >&2; exit 1; }
done


# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench


# requests/s of one redis-benchmark run: bench PORT DEPTH REQUESTS
bench() {
  local csv rps
  csv=$(redis-benchmark -h 127.0.0.1 -p "$1" -t ping_mbulk -c "$clients" -n "$3" -P "$2" --csv 2>/dev/null)
  rps=$(awk -F'"' '$2 == "PING_MBULK" { print $4 }' <<<"$csv")
  if [[ -z $rps ]]; then
    echo "redis-benchmark gave no result on port $1: $csv" >&2
    return 1
  fi
  echo "$rps"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

start_server deferq "$deferq_bin" --threads "$deferq_threads"
deferq_port=$started_port
start_server redis redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
redis_port=$started_port

echo "redis-benchmark -t ping_mbulk -c $clients; $runs interleaved runs per server;" \
  "deferq --threads $deferq_threads; $(redis-server --version | awk '{ print $1, $2, $3 }')"
# Warm-up (not counted): first connections, page faults, CPU frequency.
bench "$deferq_port" 1 20000 >/dev/null
bench "$redis_port" 1 20000 >/dev/null

summary=()
printf '%-6s %-7s %14s %14s\n' depth run "deferq req/s" "redis req/s"
for depth in 1 32; do
  n=$requests
  ((depth == 1)) || n=$requests_pipelined
  ours=()
  theirs=()
  for ((run = 1; run <= runs; run++)); do
    ours+=("$(bench "$deferq_port" "$depth" "$n")")
    theirs+=("$(bench "$redis_port" "$depth" "$n")")
    printf '%-6s %-7s %14s %14s\n' "P$depth" "$run" "${ours[-1]}" "${theirs[-1]}"
  done
  ours_median=$(median "${ours[@]}")
  theirs_median=$(median "${theirs[@]}")
  ratio=$(awk -v a="$ours_median" -v b="$theirs_median" 'BEGIN { printf "%.2f", a / b }')
  printf '%-6s %-7s %14s %14s\n' "P$depth" median "$ours_median" "$theirs_median"
  summary+=("$(printf 'P%-3s deferq/redis = %s  (median %s vs %s req/s)' "$depth" "$ratio" \
    "$ours_median" "$theirs_median")")
done
echo
printf '%s\n' "${summary[@]}"
