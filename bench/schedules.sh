#!/usr/bin/env bash
# Waiting schedules cost nothing (issue 25): N CRON schedules (default 100,000, over 1,000
# queues, due over the next day in Europe/Paris) against the reference, the same number of
# one-off delayed jobs due over the same day. Per phase a fresh redis-server (pinned to one core)
# and deferq (1 thread, the other core); Redis and deferq CPU while nothing is due, as % of a
# core, and Redis memory per job. The phases alternate, three runs; medians and the ratios
# schedules/delayed. Target: idle Redis <= 1% of a core with the schedules waiting.
#
# Environment: DEFERQ_BIN (default build/src/deferq), BENCH_SCHEDULES (default 100000),
# BENCH_SCHEDULE_QUEUES (default 1000), BENCH_RUNS (default 3).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
jobs=${BENCH_SCHEDULES:-100000}
queues=${BENCH_SCHEDULE_QUEUES:-1000}
runs=${BENCH_RUNS:-3}

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-schedules

cpus=$(nproc)
redis_cpu=$((cpus > 1 ? 1 : 0))
results=$workdir/results.jsonl
: >"$results"
echo "== $jobs waiting jobs over $queues queues: CRON schedules vs one-off delayed jobs"
for run in $(seq 1 "$runs"); do
  order="cron delayed"
  ((run % 2 == 0)) && order="delayed cron"
  for kind in $order; do
    start_server "redis-$kind$run" taskset -c "$redis_cpu" redis-server --bind 127.0.0.1 \
      --save '' --appendonly no --dir "$workdir"
    redis_port=$started_port
    redis_pid=$started_pid
    start_server "deferq-$kind$run" taskset -c 0 "$deferq_bin" --threads 1 \
      --pool "default=redis://127.0.0.1:$redis_port"
    wait_deferq_pool "deferq-$kind$run"
    timeout 300 taskset -c 0 /usr/bin/python3 "$repo/bench/schedules.py" "$kind" \
      --deferq "$started_port" --deferq-pid "$started_pid" --redis "$redis_port" \
      --jobs "$jobs" --queues "$queues" | tee -a "$results"
    kill -TERM "$started_pid" "$redis_pid" 2>/dev/null || true
  done
done
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {k: {f: statistics.median(r[f] for r in rows if r['kind'] == k)
           for f in ('redis_pct', 'deferq_pct', 'bytes_per_job', 'publish_per_s')}
       for k in ('cron', 'delayed')}
c, d = med['cron'], med['delayed']
print('medians of %d runs:' % (len(rows) // 2))
for k in ('cron', 'delayed'):
    m = med[k]
    print('  %-8s idle Redis %5.2f%% of a core, deferq %5.2f%%; %6.1f B per job in Redis; '
          'published %7.0f/s' % (k, m['redis_pct'], m['deferq_pct'], m['bytes_per_job'],
                                 m['publish_per_s']))
print('  ratio schedules/delayed: idle Redis %.2fx (+%.2f points), memory %.2fx' % (
    c['redis_pct'] / max(d['redis_pct'], 0.01), c['redis_pct'] - d['redis_pct'],
    c['bytes_per_job'] / d['bytes_per_job']))
print('  target: idle Redis with the schedules waiting <= 1%% of a core: %s' %
      ('met' if c['redis_pct'] <= 1.0 else 'NOT met'))
PY
