#!/usr/bin/env bash
# Redis CPU per job, deferq against the usual layout, and the idle cost of many queues (issue 8).
#
# 1. Cost per step. Two redis-servers pinned to one core (taskset), deferq (1 thread) and the
#    driver pinned to the other: one server behind deferq, one running the usual layout's four
#    scripts (a string key per job with SET EX, one timer ZSET, a ready LIST; bench/redis_cost.py
#    holds them exactly as issue 8 gives them) straight from the driver. Per run, each layout in
#    turn (the order alternates between runs) goes through the life of N jobs, 64-byte payload,
#    ttl 86400, unique ids, falling due over a 2-second window that starts after both published:
#      delayed publish   PUBLISH q payload PAT due          | publish.lua (SET EX + ZADD)
#      due -> ready      deferq's own pump, until QSTAT      | pump.lua called until it returns 0
#                        shows every job ready              |   once the window has passed
#      consume           CONSUME q                          | consume.lua (RPOP + GET + ZADD)
#      ack               ACK q id                           | ack.lua (DEL + ZREM)
#    Each phase: CONFIG RESETSTAT, then INFO cpu and INFO commandstats of that layout's
#    redis-server around it; µs of Redis CPU per job. Medians of 3 runs and the ratio
#    deferq/usual per step and for the whole life, next to the targets (<= 1.5x whole life,
#    <= 1.2x delayed publish).
#    Then the whole life again as a deployment whose consumers block (BENCH_WAITING_JOBS, default
#    5000; 0 leaves it out): 4 consumers wait in `CONSUME q TIMEOUT 1` before anything is
#    published and ACK each job as it comes, the jobs falling due at 1,000 per second; Redis CPU
#    from the first publish to the last ACK, per job, against the usual layout's whole life.
# 2. Idle cost. For 1, 1,000 and 10,000 queues, a fresh redis-server and deferq; one delayed job
#    (due in an hour) published to each queue; after 3 s, Redis CPU (INFO cpu) and deferq CPU
#    (/proc) over 5 s, as % of a core; then one more publish to each queue, counting TRYAGAIN.
#
# Environment: DEFERQ_BIN (default build/src/deferq), BENCH_COST_JOBS (default 20000),
# BENCH_COST_LEAD_MS (default 5000: from the start of publishing to the first due time; raise it
# on a busy machine), BENCH_IDLE_QUEUES (default "1 1000 10000").
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
jobs=${BENCH_COST_JOBS:-20000}
lead_ms=${BENCH_COST_LEAD_MS:-5000}
idle_levels=${BENCH_IDLE_QUEUES:-1 1000 10000}

for tool in redis-cli redis-server taskset /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-redis-cost

cpus=$(nproc)
redis_cpu=$((cpus > 1 ? 1 : 0))
redis_server() { start_server "$1" taskset -c "$redis_cpu" redis-server --bind 127.0.0.1 \
  --save '' --appendonly no --dir "$workdir"; }

# start_deferq NAME REDIS_PORT: deferq on core 0, once its job commands reach Redis.
start_deferq() {
  start_server "$1" taskset -c 0 "$deferq_bin" --threads 1 --pool "default=redis://127.0.0.1:$2"
  wait_deferq_pool "$1"
}
driver=(taskset -c 0 /usr/bin/python3 "$repo/bench/redis_cost.py")

echo "== Redis CPU per job: deferq vs the usual layout ($jobs jobs per run)"
redis_server redis-deferq
deferq_redis=$started_port
redis_server redis-usual
usual_redis=$started_port
start_deferq deferq "$deferq_redis"
timeout 600 "${driver[@]}" cost --deferq "$started_port" --deferq-redis "$deferq_redis" \
  --usual-redis "$usual_redis" --jobs "$jobs" --lead-ms "$lead_ms" \
  --waiting-jobs "${BENCH_WAITING_JOBS:-5000}"

echo
echo "== Idle cost: queues holding one delayed job each"
for queues in $idle_levels; do
  redis_server "redis-idle$queues"
  idle_redis=$started_port
  redis_pid=$started_pid
  start_deferq "deferq-idle$queues" "$idle_redis"
  deferq_pid=$started_pid  # taskset execs the binary: same pid
  timeout 300 "${driver[@]}" idle --deferq "$started_port" --deferq-pid "$deferq_pid" \
    --deferq-redis "$idle_redis" --queues "$queues"
  kill -TERM "$started_pid" "$redis_pid" 2>/dev/null || true
done
