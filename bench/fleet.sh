#!/usr/bin/env bash
# deferq in the shapes a real fleet has (issue 21), each figure next to its ratio against (a) the
# same probe on one queue and (b) BullMQ 6 doing the same work, plus the raw figures of every run.
#
#   many     2 instances, consumers (2 per instance) blocked in one CONSUME naming 1,000 queues
#            (COUNT 100), 1,250 jobs/s falling due spread over them (bench/lateness --queues):
#            lateness p50/p99, Redis and deferq CPU per job; (a) 1 queue, (b) BullMQ 1,250 jobs/s
#   fast     the same at 10,000 jobs/s; (a) 1 queue
#   waiting  1,000 jobs/s on one queue, 4 consumers waiting with COUNT 1 (one job per reply, one
#            ACK each): lateness, Redis and deferq CPU per job; (b) BullMQ 1,000 jobs/s
#   idle     10,000 consumers each blocked on its own empty queue over 2 instances: Redis and
#            deferq CPU (% of a core), then a job published through the other instance to 200 of
#            those queues: wake-up latency p50/p99
#   life     whole life per job (delayed publish, due, CONSUME COUNT 100, ACK) of 100,000 jobs on
#            1 queue, over 1,000 queues and over 100,000 queues (one job each): Redis µs per job
#            (INFO commandstats) and Redis CPU (INFO cpu); (a) 1 queue
#   reply    10,000 request/reply round trips (a reply queue each, retain_seconds = 3) on a Redis
#            holding 20,000 waiting jobs: keys and used_memory once the retention has passed, and
#            the /metrics series left for those queues (twice: used_memory is that of the second
#            round, the first also allocates Redis's latency histogram of each new command)
#
# BullMQ: npm `bullmq@6` (with ioredis), one queue, a Worker of concurrency 50, removeOnComplete
# (bench/fleet/bullmq.js), on its own redis-server; installed once into build/bench-fleet-node.
# Redis is pinned to the last core, deferq (and node) to core 0 (taskset); runs interleave.
#
# Environment: DEFERQ_BIN (default build/src/deferq), FLEET_RUNS (default 3), FLEET_SHAPES
# (default "many,fast,waiting,idle,life,reply"), FLEET_QUEUES (default 1000).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
for tool in redis-server redis-cli taskset node npm curl /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
[[ -x $repo/build/bench/lateness ]] || ninja -C "$repo/build" bench/lateness

node_dir=$repo/build/bench-fleet-node
if [[ ! -d $node_dir/node_modules/bullmq || ! -d $node_dir/node_modules/ioredis ]]; then
  mkdir -p "$node_dir"
  (cd "$node_dir" && npm install --no-audit --no-fund --silent bullmq@6 ioredis@5 >/dev/null)
fi

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec timeout 3600 /usr/bin/python3 "$repo/bench/fleet.py" --deferq "$deferq_bin" \
  --lateness "$repo/build/bench/lateness" --bullmq-js "$repo/bench/fleet/bullmq.js" \
  --node-modules "$node_dir/node_modules" --runs "${FLEET_RUNS:-3}" \
  --shapes "${FLEET_SHAPES:-many,fast,waiting,idle,life,reply}" --queues "${FLEET_QUEUES:-1000}"
