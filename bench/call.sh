#!/usr/bin/env bash
# Request/reply through CALL against the two-queue pattern and BullMQ 6's waitUntilFinished,
# in one run (issue 26): round trip p50/p99 and Redis CPU per round trip, as ratios against
# CALL, plus the raw figures of every run (bench/call.py has the details).
#
# BullMQ: npm `bullmq@6` (with ioredis), installed once into build/bench-fleet-node (shared with
# bench/fleet.sh). Redis is pinned to the last core, deferq, node and the driver to core 0.
#
# Environment: DEFERQ_BIN (default build/src/deferq), CALL_RUNS (default 3), CALL_N (round trips
# per phase, default 4000), CALL_REQUESTERS (default 8).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
for tool in redis-server taskset node npm /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"

node_dir=$repo/build/bench-fleet-node
if [[ ! -d $node_dir/node_modules/bullmq || ! -d $node_dir/node_modules/ioredis ]]; then
  mkdir -p "$node_dir"
  (cd "$node_dir" && npm install --no-audit --no-fund --silent bullmq@6 ioredis@5 >/dev/null)
fi

exec timeout 3600 taskset -c 0 /usr/bin/python3 "$repo/bench/call.py" --deferq "$deferq_bin" \
  --bullmq-js "$repo/bench/call/bullmq.js" --node-modules "$node_dir/node_modules" \
  --runs "${CALL_RUNS:-3}" --n "${CALL_N:-4000}" --requesters "${CALL_REQUESTERS:-8}"
