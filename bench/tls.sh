#!/usr/bin/env bash
# What TLS costs, in the same run: PING and a delayed PUBLISH through deferq with TLS on both
# sides (clients on tls.listen, the pool at rediss://) against the same deferq setup in plain
# text, and PING of deferq over TLS against redis-server over TLS. redis-benchmark -c 50 at
# pipeline depth 1 and 32, three interleaved runs per target (TLS, plain, TLS, ...), medians.
# The servers (one redis-server with a plain and a TLS port, two deferq) share core 0; the
# benchmark client runs on core 1. Prints every run, the medians and the ratios; read the ratios,
# not the absolute rates (the machine is shared).
#
# Environment:
#   DEFERQ_BIN                path of the deferq binary (default: build/src/deferq, built with
#                             ninja when missing)
#   BENCH_REQUESTS            requests per run at depth 1 (default 20000)
#   BENCH_REQUESTS_PIPELINED  requests per run at depth 32 (default 200000)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
requests=${BENCH_REQUESTS:-20000}
requests_pipelined=${BENCH_REQUESTS_PIPELINED:-200000}
runs=3
clients=50

for tool in redis-benchmark redis-cli redis-server openssl taskset; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-tls

# Certificates for the run: a CA and a server certificate for 127.0.0.1.
certs=$workdir/certs
mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$certs/ca.key" -out "$certs/ca.crt" -days 1 \
  -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$certs/server.key" -out "$certs/server.csr" \
  -subj "/CN=bench" 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" >"$certs/server.ext"
openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
  -CAcreateserial -out "$certs/server.crt" -days 1 -extfile "$certs/server.ext" 2>/dev/null

redis_tls_port=$(free_port)
start_server redis taskset -c 0 redis-server --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$workdir" --tls-port "$redis_tls_port" --tls-cert-file "$certs/server.crt" \
  --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.crt" --tls-auth-clients no
redis_port=$started_port

# deferq with TLS on both sides, and the same in plain text; one thread each.
tls_port=$(free_port)
cat >"$workdir/tls.toml" <<EOF
[server]
metrics_listen = "off"
[tls]
listen = "127.0.0.1:$tls_port"
cert_file = "$certs/server.crt"
key_file = "$certs/server.key"
upstream_ca_file = "$certs/ca.crt"
[pools.default]
addr = "rediss://127.0.0.1:$redis_tls_port"
EOF
cat >"$workdir/plain.toml" <<EOF
[server]
metrics_listen = "off"
[pools.default]
addr = "redis://127.0.0.1:$redis_port"
EOF
start_server deferq-tls taskset -c 0 "$deferq_bin" --threads 1 --config "$workdir/tls.toml"
wait_deferq_pool deferq-tls
tls_pid=$started_pid
start_server deferq-plain taskset -c 0 "$deferq_bin" --threads 1 --config "$workdir/plain.toml"
wait_deferq_pool deferq-plain
plain_port=$started_port
plain_pid=$started_pid

# CPU time of a process, all its threads, in ns (schedstat: time on a CPU).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ t += $1 } END { printf "%.0f", t }'; }

tls_args=(--tls --cacert "$certs/ca.crt")

# requests/s of one run: bench PORT TLS(0|1) DEPTH REQUESTS COMMAND...; with BENCH_PID set, also
# that process's CPU per request (µs) after a space.
bench() {
  local port=$1 tls=$2 depth=$3 n=$4 csv rps before=0
  shift 4
  [[ -z ${BENCH_PID:-} ]] || before=$(cpu_ns "$BENCH_PID")
  local extra=()
  ((tls == 0)) || extra=("${tls_args[@]}")
  csv=$(taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" "${extra[@]}" -c "$clients" \
    -n "$n" -P "$depth" --csv "$@" 2>/dev/null)
  rps=$(awk -F'"' 'NR > 1 && $4 != "" { v = $4 } END { print v }' <<<"$csv")
  if [[ -z $rps ]]; then
    echo "redis-benchmark gave no result on port $port: $csv" >&2
    return 1
  fi
  if [[ -n ${BENCH_PID:-} ]]; then
    echo "$rps $(awk -v a="$before" -v b="$(cpu_ns "$BENCH_PID")" -v n="$n" \
      'BEGIN { printf "%.2f", (b - a) / 1000 / n }')"
  else
    echo "$rps"
  fi
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "redis-benchmark -c $clients; $runs interleaved runs per target; deferq --threads 1;" \
  "$(redis-server --version | awk '{ print $1, $2, $3 }'); $(openssl version | awk '{ print $1, $2 }')"
# Warm-up (not counted): first connections and handshakes, page faults.
bench "$tls_port" 1 1 5000 PING >/dev/null
bench "$plain_port" 0 1 5000 PING >/dev/null
bench "$redis_tls_port" 1 1 5000 PING >/dev/null

summary=()
printf '%-8s %-5s %-7s %14s %14s %14s %12s %12s\n' command depth run "deferq tls" "deferq plain" \
  "redis tls" "tls us/req" "plain us/req"
for what in PING PUBLISH; do
  if [[ $what == PING ]]; then
    cmd=(PING)
  else
    cmd=(PUBLISH bench-tls payload-of-32-bytes-xxxxxxxxxxxx DELAY 3600)
  fi
  for depth in 1 32; do
    n=$requests
    ((depth == 1)) || n=$requests_pipelined
    a=() b=() c=() ua=() ub=()
    for ((run = 1; run <= runs; run++)); do
      read -r rps us < <(BENCH_PID=$tls_pid bench "$tls_port" 1 "$depth" "$n" "${cmd[@]}")
      a+=("$rps") ua+=("$us")
      read -r rps us < <(BENCH_PID=$plain_pid bench "$plain_port" 0 "$depth" "$n" "${cmd[@]}")
      b+=("$rps") ub+=("$us")
      if [[ $what == PING ]]; then
        c+=("$(bench "$redis_tls_port" 1 "$depth" "$n" PING)")
      else
        c+=("-")
      fi
      printf '%-8s %-5s %-7s %14s %14s %14s %12s %12s\n' "$what" "P$depth" "$run" "${a[-1]}" \
        "${b[-1]}" "${c[-1]}" "${ua[-1]}" "${ub[-1]}"
    done
    ma=$(median "${a[@]}")
    mb=$(median "${b[@]}")
    mua=$(median "${ua[@]}")
    mub=$(median "${ub[@]}")
    line=$(printf '%-8s P%-3s deferq tls/plain = %s (median %s vs %s req/s); deferq CPU per request tls/plain = %s (%s vs %s us)' \
      "$what" "$depth" "$(ratio "$ma" "$mb")" "$ma" "$mb" "$(ratio "$mua" "$mub")" "$mua" "$mub")
    if [[ $what == PING ]]; then
      mc=$(median "${c[@]}")
      line+=$(printf '; deferq tls / redis tls = %s (%s req/s)' "$(ratio "$ma" "$mc")" "$mc")
    fi
    summary+=("$line")
  done
done
echo
printf '%s\n' "${summary[@]}"
