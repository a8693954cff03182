#!/usr/bin/env bash
# The pump's Redis cost, the storage scripts of one directory against another (issue 8): for
# trying a change to pump.lua or the common code (common/*.lua) without building deferq or
# running the whole bench/redis_cost.sh. One redis-server pinned to a core of its own, deferq (1 thread) and the
# driver on the other; deferq publishes the jobs and is stopped, then bench/pump_ab.py loads both
# libraries and calls their pump functions itself, interleaved (see it for what is measured).
#
#   bench/pump_ab.sh                      the checked-out scripts against themselves (noise)
#   bench/pump_ab.sh DIR                  src/persist/scripts (reference) against DIR
#   bench/pump_ab.sh REF_DIR DIR          REF_DIR against DIR
#
# A DIR is a copy of src/persist/scripts (list.txt, common/, every script) with changes.
# Environment: DEFERQ_BIN (default build/src/deferq), BENCH_AB_JOBS (default 20000),
# BENCH_AB_ROUNDS (default 30), BENCH_AB_SPARSE (queues of one job each, default 3000).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
reference=$repo/src/persist/scripts
candidate=$reference
if [[ $# -eq 1 ]]; then candidate=$1; fi
if [[ $# -ge 2 ]]; then reference=$1; candidate=$2; fi

for tool in redis-cli redis-server taskset /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-pump-ab

cpus=$(nproc)
redis_cpu=$((cpus > 1 ? 1 : 0))
start_server redis taskset -c "$redis_cpu" redis-server --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$workdir"
redis_port=$started_port
start_server deferq taskset -c 0 "$deferq_bin" --threads 1 \
  --pool "default=redis://127.0.0.1:$redis_port"
wait_deferq_pool deferq
timeout 600 taskset -c 0 /usr/bin/python3 "$repo/bench/pump_ab.py" --deferq "$started_port" \
  --deferq-pid "$started_pid" --redis "$redis_port" --embed "$repo/src/persist/embed_scripts.py" \
  --reference "$reference" --candidate "$candidate" --jobs "${BENCH_AB_JOBS:-20000}" \
  --rounds "${BENCH_AB_ROUNDS:-30}" --sparse-queues "${BENCH_AB_SPARSE:-3000}"
