#!/usr/bin/env bash
# Real-client tests: redis-cli, redis-py and ioredis publish, block in CONSUME and ACK through
# their ordinary generic-command APIs against a real deferq and redis-server (SPEC §3).
#
#   tests/clients/run_clients.sh /path/to/deferq
#
# Starts redis-server and deferq on free loopback ports, runs the redis-cli checks below, then
# test_redis_py.py (/usr/bin/python3, Debian's python3-redis) and test_ioredis.js (node; ioredis
# as pinned in package.json is installed into tests/clients/node_modules when missing). Blocked
# consumers in one client are woken by publishes from another (redis-cli <-> redis-py,
# redis-cli -> ioredis, ioredis -> ioredis). Stops its servers on exit. Prints a summary line per
# client and a final "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deferq_bin=${1:?usage: run_clients.sh /path/to/deferq}
[[ -x $deferq_bin ]] || { echo "$deferq_bin is not executable" >&2; exit 2; }
for tool in redis-server redis-cli node npm /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 2; }
done

# shellcheck source=scripts/lib/servers.sh
source "$here/../../scripts/lib/servers.sh"
servers_init clients


start_server redis redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
redis_port=$started_port
start_server deferq "$deferq_bin" --threads 2 --pool "default=redis://127.0.0.1:$redis_port"
port=$started_port
# Job commands answer TRYAGAIN until deferq's pool connections are up.
for ((i = 0; i < 100; i++)); do
  [[ $(redis-cli -p "$port" QSTAT startup-probe 2>&1 | head -1) == ready ]] && break
  sleep 0.05
done

# ------------------------------------------------------------------------------------------------
# redis-cli: plain command lines. Without a tty redis-cli prints each reply element on its own
# line, integers as digits and a null reply as an empty line.

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
cli_passed=0
cli_failed=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    cli_passed=$((cli_passed + 1))
    echo "ok   redis-cli: $1"
  else
    cli_failed=$((cli_failed + 1))
    echo "FAIL redis-cli: $1"
    echo "     expected: $(printf '%q' "$2")"
    echo "     actual:   $(printf '%q' "$3")"
  fi
}
id_re='^[0-9A-HJKMNP-TV-Z]{26}$'
# Jobs are [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]: elapsed_ms (every
# 7th line) varies, so it is shown as "ms".
jobs_of() { awk 'NR % 7 == 0 { print "ms"; next } { print }'; }
now_ms() { date +%s%3N; }

q=cli-basic-$RANDOM
id=$(cli PUBLISH "$q" 'hello redis-cli')
check "PUBLISH answers a 26-character id" yes "$([[ $id =~ $id_re ]] && echo yes || echo "no: $id")"
check "CONSUME answers [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]" \
  "$(printf '%s\n' "$q" "$id" 'hello redis-cli' 0 86400 1 ms)" "$(cli CONSUME "$q" TTR 30 | jobs_of)"
check "CONSUME of an empty queue answers null" "" "$(cli CONSUME "$q")"
check "ACK answers 1" 1 "$(cli ACK "$q" "$id")"
check "a second ACK answers 0" 0 "$(cli ACK "$q" "$id")"
check "QSTAT" "$(printf '%s\n' ready 0 delayed 0 leased 0 dead 0 published_total 1 \
  consumed_total 1 acked_total 1 expired_total 0 dead_total 0)" "$(cli QSTAT "$q")"

q=cli-count-$RANDOM
id1=$(cli PUBLISH "$q" one TRIES 2)
id2=$(cli PUBLISH "$q" 'two words')
check "CONSUME COUNT answers every job in publish order" \
  "$(printf '%s\n' "$q" "$id1" one 1 86400 1 ms "$q" "$id2" 'two words' 0 86400 1 ms)" \
  "$(cli CONSUME "$q" COUNT 5 TTR 30 | jobs_of)"
check "ACK of several ids counts the ones found" 2 "$(cli ACK "$q" "$id1" "$id2" nosuchid)"

q=cli-timeout-$RANDOM
t0=$(now_ms)
out=$(cli CONSUME "$q" TIMEOUT 0.3)
took=$(($(now_ms) - t0))
check "CONSUME TIMEOUT 0.3 on an empty queue answers null" "" "$out"
check "... after about 0.3 s" yes "$( ((took >= 250 && took < 2000)) && echo yes || echo "no: $took ms")"

q=cli-wake-$RANDOM
cli CONSUME "$q" TTR 30 TIMEOUT 10 >"$workdir/blocked.out" &
blocked=$!
sleep 0.3
check "a blocked CONSUME waits" yes "$(kill -0 "$blocked" 2>/dev/null && echo yes || echo returned)"
t0=$(now_ms)
id=$(cli PUBLISH "$q" 'wake up')
wait "$blocked" || true
took=$(($(now_ms) - t0))
check "a redis-cli blocked in CONSUME is woken by a PUBLISH from another redis-cli" \
  "$(printf '%s\n' "$q" "$id" 'wake up' 0 86400 1 ms)" "$(jobs_of <"$workdir/blocked.out")"
check "... within a second of the publish" yes "$( ((took < 1000)) && echo yes || echo "no: $took ms")"
check "ACK of the woken job" 1 "$(cli ACK "$q" "$id")"

check "errors: TRIES 0" "ERR value is not an integer or out of range" \
  "$(cli PUBLISH "$q" x TRIES 0 2>&1)"
check "errors: negative TIMEOUT" "ERR timeout is negative" "$(cli CONSUME "$q" TIMEOUT -1 2>&1)"
echo "redis-cli: $cli_passed passed, $cli_failed failed"

# ------------------------------------------------------------------------------------------------
status=0
results=("redis-cli:$cli_passed:$cli_failed")
((cli_failed == 0)) || status=1

summary() {  # summary NAME LOGFILE: the "N passed, M failed" line of a test program
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -1 || true)
  if [[ -z $line ]]; then
    results+=("$1:0:1")
  else
    results+=("$1:$(awk '{ print $1 ":" $3 }' <<<"$line")")
  fi
}

echo
echo "== redis-py ($(/usr/bin/python3 -c 'import redis; print(redis.__version__)'))"
DEFERQ_PORT=$port /usr/bin/python3 "$here/test_redis_py.py" 2>&1 | tee "$workdir/redis_py.out" || status=1
summary redis-py "$workdir/redis_py.out"

echo
if [[ ! -d $here/node_modules/ioredis ]]; then
  version=$(node -p "require('$here/package.json').dependencies.ioredis")
  echo "installing ioredis@$version into $here/node_modules"
  # --save-exact with the pinned version leaves package.json and package-lock.json unchanged.
  npm install --no-audit --no-fund --save-exact --prefix "$here" "ioredis@$version" >&2
fi
echo "== ioredis ($(node -p "require('$here/node_modules/ioredis/package.json').version"))"
DEFERQ_PORT=$port node "$here/test_ioredis.js" 2>&1 | tee "$workdir/ioredis.out" || status=1
summary ioredis "$workdir/ioredis.out"

echo
passed=0
failed=0
for r in "${results[@]}"; do
  IFS=: read -r name p f <<<"$r"
  printf '%-10s %3d passed, %d failed\n' "$name" "$p" "$f"
  passed=$((passed + p))
  failed=$((failed + f))
done
((failed == 0)) || status=1
echo "$passed passed, $failed failed"
exit "$status"
