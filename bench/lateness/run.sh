#!/usr/bin/env bash
# Delivery lateness of delayed jobs: how long after its due time a job reaches a consumer that was
# already waiting for it. Starts its own redis-server and deferq instance(s) on free loopback ports,
# runs bench/lateness/lateness.cc (see the comment at its top for what exactly is measured) for
# each scenario, and prints one table of medians over the runs.
#
# Scenarios, each with the timing wheel on ([server] wheel = true, the default) and off (wheel =
# false: due jobs move only on the periodic sweep, every sweep_ms = 100 ms):
#   1. 5,000 jobs, PDELAY uniform in [1000, 5000) ms, 1 instance        (~1,250 jobs fall due/s)
#   2. the same through 2 instances sharing the redis-server (published round-robin)
#   3. 100,000 jobs falling due within 5 s on 1 instance (20,000/s): published with PAT at
#      publish-start + [3000, 8000) ms, so all of them are published (~1.5 s here) before the
#      first falls due and the due times cover exactly 5 s; the tool prints the margin.
# Every scenario gets fresh deferq process(es) and an empty redis (FLUSHALL); only the scenario's
# own instances run, so with the wheel off there is exactly one sweeper per instance. Consumers:
# 4 threads per instance, CONSUME ... TIMEOUT 1 COUNT 100, ACK per reply.
#
# Targets (wheel on): p99 <= 2 ms and max <= 10 ms at 5,000 jobs; p99 <= 10 ms at 20,000 jobs/s.
# The table shows the median of each figure over the runs; early and missing are totals over all
# runs and must be 0. A machine of 2 shared cores runs deferq, redis-server and the consumers at
# once: read the tails with that in mind (docs/performance.md). Two columns say how quiet the
# machine was during each scenario: "stall", the longest a 1 ms sleep in the tool overslept (its
# probe thread), and "others", the CPU (in cores) used by processes other than this benchmark's
# redis-server, deferq and tool (/proc/stat busy time minus theirs). Both are medians over runs.
#
# Environment:
#   DEFERQ_BUILD    meson build directory (default: build); deferq is DEFERQ_BUILD/src/deferq,
#                   the tool DEFERQ_BUILD/bench/lateness
#   DEFERQ_BIN      deferq binary (default: DEFERQ_BUILD/src/deferq, built with ninja when missing)
#   LATENESS_BIN    the tool (default: DEFERQ_BUILD/bench/lateness; when missing it is compiled
#                   from bench/lateness/lateness.cc into a temporary directory)
#   DEFERQ_THREADS  deferq --threads (default 2)
#   RUNS            runs per scenario (default 3)
#   CONSUMERS       consumer threads per instance (default 4)
#   JOBS_SMALL      jobs in scenarios 1 and 2 (default 5000)
#   JOBS_LARGE      jobs in scenario 3 (default 100000)
#   KEEP_DUMPS=dir  keep per-job "due_ms lateness_ms" files of every run in dir, and print each
#                   run's lateness split by where the due time falls in its second: the first
#                   150 ms (when deferq stages the second's bucket, see docs/performance.md) or later
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${DEFERQ_BUILD:-$repo/build}
deferq_bin=${DEFERQ_BIN:-$build/src/deferq}
lateness_bin=${LATENESS_BIN:-$build/bench/lateness}
threads=${DEFERQ_THREADS:-2}
runs=${RUNS:-3}
consumers=${CONSUMERS:-4}
jobs_small=${JOBS_SMALL:-5000}
jobs_large=${JOBS_LARGE:-100000}
keep_dumps=${KEEP_DUMPS:-}

for tool in redis-server redis-cli ss timeout; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$build" "$repo"

workdir=$(mktemp -d "${TMPDIR:-/tmp}/deferq-lateness.XXXXXX")
redis_pid=""
deferq_pids=()

stop_pid() {  # SIGTERM, up to 5 s, then SIGKILL; reaps our child
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_deferqs() {
  local pid
  for pid in "${deferq_pids[@]}"; do stop_pid "$pid"; done
  deferq_pids=()
}
cleanup() {
  stop_deferqs
  [[ -n $redis_pid ]] && stop_pid "$redis_pid"
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ! -x $lateness_bin ]]; then
  if [[ -n ${LATENESS_BIN:-} ]]; then
    echo "LATENESS_BIN=$lateness_bin is not an executable" >&2
    exit 1
  fi
  # The build directory predates bench/meson.build (or was configured without it): compile the
  # single file here with the flags the project uses.
  echo "compiling the lateness tool ($lateness_bin is missing)" >&2
  if ! command -v pkg-config >/dev/null || ! pkg-config --exists hiredis; then
    echo "hiredis development files not found" >&2
    exit 1
  fi
  # shellcheck disable=SC2046
  "${CXX:-c++}" -std=c++20 -O2 -Wall -Wextra -Werror -o "$workdir/lateness" \
    "$repo/bench/lateness/lateness.cc" $(pkg-config --cflags --libs hiredis) -pthread
  lateness_bin=$workdir/lateness
fi

wait_ping() {  # port pid: 0 once the server answers PONG, 1 if it died or 5 s passed
  local port=$1 pid=$2 i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  return 1
}

redis_port=""
for attempt in 1 2 3 4 5; do
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$workdir/redis.log" &
  redis_pid=$!
  wait_ping "$redis_port" "$redis_pid" && break
  stop_pid "$redis_pid"
  redis_pid=""
  ((attempt == 5)) && { echo "redis-server did not start" >&2; cat "$workdir/redis.log" >&2; exit 1; }
done

printf '[server]\nwheel = true\n%s' "${EXTRA_CONFIG:-}" >"$workdir/wheel-on.toml"
printf '[server]\nwheel = false\n' >"$workdir/wheel-off.toml"

start_deferq() {  # config: starts one instance, appends its port to deferq_ports
  local config=$1 port attempt pid
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    "$deferq_bin" --port "$port" --threads "$threads" --pool "default=redis://127.0.0.1:$redis_port" \
      --config "$config" >>"$workdir/deferq-$port.log" 2>&1 &
    pid=$!
    if wait_ping "$port" "$pid"; then
      deferq_pids+=("$pid")
      deferq_ports+=("$port")
      return 0
    fi
    stop_pid "$pid"
  done
  echo "deferq did not start; its last log:" >&2
  cat "$workdir/deferq-$port.log" >&2
  exit 1
}

# scenario -> instances, tool arguments, description
declare -A inst args desc
inst[1]=1; args[1]="--jobs $jobs_small --delay-min 1000 --delay-max 5000"
desc[1]="1: $jobs_small jobs, 1 inst"
inst[2]=2; args[2]="--jobs $jobs_small --delay-min 1000 --delay-max 5000"
desc[2]="2: $jobs_small jobs, 2 inst"
inst[3]=1; args[3]="--jobs $jobs_large --delay-min 3000 --delay-max 8000 --pat"
desc[3]="3: $jobs_large in 5 s, 1 inst"

# CPU accounting (clock ticks): the machine's busy time, and that of one of our processes.
clk_tck=$(getconf CLK_TCK)
machine_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
proc_ticks() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  s=${s##*) }  # after "pid (comm) ": field 12 is utime, 13 stime
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}
servers_ticks() {
  local total pid
  total=$(proc_ticks "$redis_pid")
  for pid in "${deferq_pids[@]}"; do total=$((total + $(proc_ticks "$pid"))); done
  echo "$total"
}

results=$workdir/results
: >"$results"
start_s=$SECONDS
echo "deferq lateness: $runs run(s); deferq --threads $threads; $consumers consumers/instance;" \
  "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((run = 1; run <= runs; run++)); do
  for wheel in on off; do
    for s in 1 2 3; do
      redis-cli -p "$redis_port" FLUSHALL >/dev/null
      deferq_ports=()
      for ((i = 0; i < inst[$s]; i++)); do start_deferq "$workdir/wheel-$wheel.toml"; done
      port_args=()
      for p in "${deferq_ports[@]}"; do port_args+=(--port "$p"); done
      dump_args=()
      [[ -n $keep_dumps ]] && mkdir -p "$keep_dumps" \
        && dump_args=(--dump "$keep_dumps/s$s-wheel_$wheel-run$run.txt")
      out=$workdir/out-$run-$wheel-$s
      busy0=$(machine_busy) ours0=$(servers_ticks) t0=$(date +%s%N)
      # shellcheck disable=SC2086
      if ! timeout -k 5 120 "$lateness_bin" "${port_args[@]}" ${args[$s]} --consumers "$consumers" \
        --grace-s 5 --seed "$run$s" --label "s$s-wheel_$wheel-run$run" "${dump_args[@]}" >"$out" 2>&1; then
        echo "lateness failed (scenario $s, wheel $wheel, run $run):" >&2
        cat "$out" >&2
        exit 1
      fi
      busy1=$(machine_busy) ours1=$(servers_ticks) t1=$(date +%s%N)
      stop_deferqs
      line=$(grep '^RESULT ' "$out")
      tool_ms=$(sed -n 's/.* cpu_ms=\([0-9]*\).*/\1/p' <<<"$line")
      line+=$(awk -v b=$((busy1 - busy0)) -v o=$((ours1 - ours0)) -v t="${tool_ms:-0}" -v hz="$clk_tck" \
        -v ns=$((t1 - t0)) 'BEGIN { s = ns / 1e9; ours = o / hz + t / 1e3
          others = (b / hz - ours) / s  # tick rounding can make it slightly negative
          printf " ours_cpu=%.2f others_cpu=%.2f", ours / s, (others > 0 ? others : 0) }')
      echo "  run $run wheel $wheel scenario $s: ${line#RESULT }"
      grep -q 'WARNING' "$out" && grep 'WARNING' "$out"
      echo "$s $wheel ${line#RESULT }" >>"$results"
    done
  done
done

# Medians per (scenario, wheel); early/missing/duplicates/due_mismatch summed; margin: minimum.
echo
echo "Delivery lateness in ms (median of $runs run(s); early, missing: totals over all runs)."
echo "Elapsed: $((SECONDS - start_s)) s."
echo
awk -v d1="${desc[1]}" -v d2="${desc[2]}" -v d3="${desc[3]}" '
function median(key,   n, i, j, t, a) {
  n = split(vals[key], a, " ")
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
  k = $1 " " $2
  if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
  for (f = 3; f <= NF; f++) {
    split($f, kv, "="); name = kv[1]; v = kv[2]
    if (name == "early" || name == "missing" || name == "duplicates" || name == "due_mismatch") sum[k, name] += v
    else if (name == "margin_ms") { if (!((k, "m") in mn) || v < mn[k, "m"]) mn[k, "m"] = v }
    else if (name == "n") n[k] = v
    else vals[k SUBSEP name] = vals[k SUBSEP name] " " v
  }
}
END {
  desc[1] = d1; desc[2] = d2; desc[3] = d3
  printf "%-24s %-5s %6s %6s %6s %6s %6s %5s %7s  %-15s %-4s %6s %6s\n", "scenario", "wheel", "N", "p50", "p90", "p99", "max", "early", "missing", "target", "met", "stall", "others"
  for (w = 0; w < 2; w++) for (s = 1; s <= 3; s++) {
    k = s " " (w == 0 ? "on" : "off")
    if (!(k in seen)) continue
    p50 = median(k SUBSEP "p50"); p90 = median(k SUBSEP "p90"); p99 = median(k SUBSEP "p99"); mx = median(k SUBSEP "max")
    if (s < 3) target = "p99<=2 max<=10"; else target = "p99<=10"
    if (w == 1) { target = "-"; met = "-" }
    else if (s < 3) met = (p99 <= 2 && mx <= 10) ? "yes" : "NO"
    else met = (p99 <= 10) ? "yes" : "NO"
    if (sum[k, "early"] > 0 || sum[k, "missing"] > 0) met = "NO"
    printf "%-24s %-5s %6d %6.1f %6.1f %6.1f %6.1f %5d %7d  %-15s %-4s %6.1f %6.2f\n", desc[s], (w == 0 ? "on" : "off"), n[k], p50, p90, p99, mx, sum[k, "early"], sum[k, "missing"], target, met, median(k SUBSEP "probe_max"), median(k SUBSEP "others_cpu")
    note = ""
    if (sum[k, "duplicates"] > 0) note = note " duplicates=" sum[k, "duplicates"]
    if (sum[k, "due_mismatch"] > 0) note = note " due_mismatch=" sum[k, "due_mismatch"]
    if (mn[k, "m"] <= 0) note = note " publishing overlapped the due window (margin " mn[k, "m"] " ms)"
    if (note != "") printf "%-24s   note:%s\n", "", note
  }
}' "$results"
echo
echo "Per run: p99 / max lateness [stall ms, others' CPU cores]:"
awk '{ k = "scenario " $1 " wheel " $2
       for (f = 3; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
       if (!(k in r)) order[++n] = k
       r[k] = r[k] sprintf("  %6s / %-6s [%s, %s]", v["p99"], v["max"], v["probe_max"], v["others_cpu"]) }
     END { for (i = 1; i <= n; i++) printf "  %-22s%s\n", order[i], r[order[i]] }' "$results"

if [[ -n $keep_dumps ]]; then
  echo
  echo "By position of the due time in its second (KEEP_DUMPS): n p50 p99 max, first 150 ms | rest:"
  for f in "$keep_dumps"/*.txt; do
    awk '{ print (($1 % 1000) < 150 ? "head" : "rest"), $2 }' "$f" | sort -k1,1 -k2,2g \
      | awk -v name="$(basename "$f" .txt)" '
          { v[$1, ++n[$1]] = $2 }
          function q(b, p,   r) { r = int(p * n[b]); if (r < p * n[b]) r++; if (r < 1) r = 1; return v[b, r] }
          END { printf "  %-20s %6d %6.1f %6.1f %6.1f | %6d %6.1f %6.1f %6.1f\n", name,
                  n["head"], q("head", 0.5), q("head", 0.99), q("head", 1),
                  n["rest"], q("rest", 0.5), q("rest", 0.99), q("rest", 1) }'
  done
fi
