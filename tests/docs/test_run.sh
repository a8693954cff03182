#!/usr/bin/env bash
# README's first command, `scripts/run`, as a newcomer runs it with no Redis: it starts a
# redis-server of its own (here on a free port, data in a temporary DEFERQ_VAR), deferq serves
# the README's first session, and stopping it (SIGTERM to its process group, as a terminal's ^C
# or a supervisor does) stops that redis-server too.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/lib/servers.sh
source "$root/scripts/lib/servers.sh"
servers_init run
port=$(free_port)
redis_port=$(free_port)
checks=0
fail() { echo "FAIL - $1"; echo "0 passed, 1 failed"; exit 1; }
pass() { checks=$((checks + 1)); echo "ok   - $1"; }

DEFERQ_VAR="$workdir/var" setsid "$root/scripts/run" --port "$port" --threads 1 \
  --pool "default=redis://127.0.0.1:$redis_port" >"$workdir/run.log" 2>&1 &
run_pid=$!
stop_run() { kill -TERM -- "-$run_pid" 2>/dev/null || true; }
trap 'stop_run; servers_cleanup' EXIT

for _ in $(seq 1 600); do
  [[ $(redis-cli -p "$port" QSTAT probe 2>/dev/null | head -1) == ready ]] && break
  sleep 0.1
done
[[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] || { cat "$workdir/run.log"; fail "deferq answers"; }
pass "scripts/run serves on --port"
grep -q "starting redis-server" "$workdir/run.log" || fail "scripts/run started a redis-server"
[[ -f $workdir/var/redis.pid && -d $workdir/var/appendonlydir ]] ||
  fail "its data is in DEFERQ_VAR with AOF on"
pass "no Redis answered: scripts/run started one, data in DEFERQ_VAR, AOF on"
[[ $(redis-cli -p "$port" PUBLISH orders order-123 DELAY 1800 ID order-123) == order-123 ]] ||
  fail "PUBLISH"
[[ $(redis-cli -p "$port" CANCEL orders order-123) == 1 ]] || fail "CANCEL"
pass "the README's first commands answer"
redis_pid=$(cat "$workdir/var/redis.pid")
stop_run
for _ in $(seq 1 100); do
  kill -0 "$run_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$run_pid" 2>/dev/null && fail "scripts/run stops on SIGTERM"
for _ in $(seq 1 50); do
  kill -0 "$redis_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$redis_pid" 2>/dev/null && fail "the redis-server it started stops with it"
pass "SIGTERM stops deferq and the redis-server scripts/run started"
echo "$checks passed, 0 failed"
