#!/usr/bin/env bash
# What opening the console's pages costs Redis (issue 24), at 1, 1,000 and 100,000 queues: per
# page kind (the overview, a queue's page, a job's page) Redis's time inside commands and its CPU
# per page load, the page loads per second, and the ratio against the same page at one queue.
# Per phase a fresh redis-server (pinned to one core) and deferq (1 thread, the other core, the
# console on its metrics port); the sizes alternate, three runs; medians. Target: every page,
# opened once a second, costs Redis at most 1% of a core (10 ms per load) at 100,000 queues.
#
# Environment: DEFERQ_BIN (default build/src/deferq), BENCH_CONSOLE_SIZES (default
# "1 1000 100000"), BENCH_RUNS (default 3).
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
read -r -a sizes <<<"${BENCH_CONSOLE_SIZES:-1 1000 100000}"
runs=${BENCH_RUNS:-3}

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-console

cpus=$(nproc)
redis_cpu=$((cpus > 1 ? 1 : 0))
results=$workdir/results.jsonl
: >"$results"
password=bench-$RANDOM$RANDOM
export DQ_BENCH_CONSOLE_PASSWORD=$password
echo "== console page loads at ${sizes[*]} queues, 3 s of loads per page kind"
for run in $(seq 1 "$runs"); do
  order=("${sizes[@]}")
  if ((run % 2 == 0)); then
    order=()
    for ((i = ${#sizes[@]} - 1; i >= 0; i--)); do order+=("${sizes[i]}"); done
  fi
  for n in "${order[@]}"; do
    start_server "redis-$n-$run" taskset -c "$redis_cpu" redis-server --bind 127.0.0.1 \
      --save '' --appendonly no --dir "$workdir"
    redis_port=$started_port
    redis_pid=$started_pid
    http_port=$(free_port)
    cat >"$workdir/console-$n-$run.toml" <<EOF
[server]
metrics_listen = "127.0.0.1:$http_port"
metrics_max_queues = 100000
console = true
[auth]
admin_password_env = "DQ_BENCH_CONSOLE_PASSWORD"
EOF
    start_server "deferq-$n-$run" taskset -c 0 "$deferq_bin" --threads 1 \
      --pool "default=redis://127.0.0.1:$redis_port" --config "$workdir/console-$n-$run.toml"
    wait_deferq_pool "deferq-$n-$run"
    timeout 600 taskset -c 0 /usr/bin/python3 "$repo/bench/console.py" --deferq "$started_port" \
      --deferq-pid "$started_pid" --redis "$redis_port" --http "$http_port" --password "$password" --queues "$n" | tee -a "$results"
    kill -TERM "$started_pid" "$redis_pid" 2>/dev/null || true
  done
done
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sizes = sorted({r['queues'] for r in rows})
fields = ('commands_us_per_page', 'cpu_us_per_page', 'calls_per_page', 'pages_per_s',
          'deferq_cpu_us_per_page', 'idle_redis_cpu_pct', 'idle_deferq_cpu_pct')
med = {(n, k): {f: statistics.median(r[k][f] for r in rows if r['queues'] == n) for f in fields}
       for n in sizes for k in ('overview', 'queue', 'job')}
print('medians of %d runs (Redis per page load, less the same seconds idle):' % (
    len(rows) // len(sizes)))
for k in ('overview', 'queue', 'job'):
    ref = med[(sizes[0], k)]
    for n in sizes:
        m = med[(n, k)]
        ratio = ('%.2fx' % (m['cpu_us_per_page'] / ref['cpu_us_per_page'])
                 if ref['cpu_us_per_page'] > 0 else '-')
        print('  %-8s %6d queues: Redis %7.1f us in commands, %7.1f us CPU (%s vs %d queue%s), '
              '%4.1f calls; at 1 page/s %.3f%% of a core; deferq %7.1f us CPU; %6.1f pages/s' % (
                  k, n, m['commands_us_per_page'], m['cpu_us_per_page'], ratio, sizes[0],
                  '' if sizes[0] == 1 else 's', m['calls_per_page'], m['cpu_us_per_page'] / 1e4,
                  m['deferq_cpu_us_per_page'], m['pages_per_s']))
idle = {n: {f: statistics.median(med[(n, k)][f] for k in ('overview', 'queue', 'job'))
           for f in ('idle_redis_cpu_pct', 'idle_deferq_cpu_pct')} for n in sizes}
for n in sizes:
    ratio = idle[n]['idle_deferq_cpu_pct'] / idle[sizes[0]]['idle_deferq_cpu_pct'] \
        if idle[sizes[0]]['idle_deferq_cpu_pct'] > 0 else float('nan')
    print('  idle (no page loaded) at %6d queues: Redis %.2f%% of a core, deferq %.2f%% '
          '(%.2fx %d queue%s)' % (n, idle[n]['idle_redis_cpu_pct'], idle[n]['idle_deferq_cpu_pct'],
                                  ratio, sizes[0], '' if sizes[0] == 1 else 's'))
worst = max(med[(sizes[-1], k)]['cpu_us_per_page'] for k in ('overview', 'queue', 'job'))
print('every page opened once a second at %d queues: %.3f%% of a Redis core (target <= 1%%)' % (
    sizes[-1], 3 * worst / 1e4))
PY
