#!/usr/bin/env bash
# deferq driven by redis-cli, the way a user first meets it: one-shot commands, RESP3 with -3,
# commands piped through stdin, --pipe mass insertion, redis:// URLs, and --no-raw output that
# must read exactly as it does against Redis 7. Starts its own deferq (and a reference
# redis-server) on free loopback ports and stops them on exit.
#
# usage: redis_cli_test.sh path/to/deferq
set -euo pipefail

deferq_bin=${1:-${DEFERQ_BIN:-}}
if [[ -z $deferq_bin || ! -x $deferq_bin ]]; then
  echo "usage: $0 path/to/deferq (got '${deferq_bin}')" >&2
  exit 2
fi
for tool in redis-cli redis-server; do
  command -v "$tool" >/dev/null || { echo "$tool not found: install redis-tools/redis-server" >&2; exit 1; }
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/servers.sh
source "$here/../../scripts/lib/servers.sh"
servers_init cli-test

failures=0
checks=0

pass() { checks=$((checks + 1)); echo "ok   - $1"; }
fail() {
  checks=$((checks + 1))
  failures=$((failures + 1))
  echo "FAIL - $1"
}

# expect_eq NAME EXPECTED ACTUAL
expect_eq() {
  if [[ $3 == "$2" ]]; then
    pass "$1"
  else
    fail "$1"
    echo "    expected: $(printf '%q' "$2")"
    echo "    actual:   $(printf '%q' "$3")"
  fi
}

# expect_line NAME EXTENDED-REGEX ACTUAL: some line of ACTUAL (CRs dropped) matches, whole line.
expect_line() {
  if tr -d '\r' <<<"$3" | grep -Eqx -- "$2"; then
    pass "$1"
  else
    fail "$1"
    echo "    no line matching: $2"
    echo "    in: $(printf '%q' "$3")"
  fi
}

start_server deferq "$deferq_bin" --threads 2
port=$started_port
deferq_pid=$started_pid
start_server redis redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
redis_port=$started_port

# One-shot commands against deferq; a failing redis-cli is recorded by the check, not fatal.
cli() { redis-cli -p "$port" "$@" 2>&1 || true; }

# --- one-shot commands ---------------------------------------------------------------------------
expect_eq "PING" "PONG" "$(cli PING)"
expect_eq "PING with a message" "hello" "$(cli PING hello)"
expect_eq "ECHO keeps spaces" "hello world" "$(cli ECHO 'hello world')"
expect_eq "--no-raw ECHO quotes the bulk string" '"hi"' "$(cli --no-raw ECHO hi)"
expect_eq "--no-raw CLIENT GETNAME is nil" "(nil)" "$(cli --no-raw CLIENT GETNAME)"
expect_eq "--no-raw SELECT 1 is out of range" "(error) ERR DB index is out of range" \
  "$(cli --no-raw SELECT 1)"
expect_eq "-r 3 repeats the command" $'PONG\nPONG\nPONG' "$(cli -r 3 PING)"
expect_line "--no-raw COMMAND COUNT is a positive integer" '\(integer\) [1-9][0-9]*' \
  "$(cli --no-raw COMMAND COUNT)"
expect_eq "--no-raw TIME is two quoted numbers" "2" \
  "$(cli --no-raw TIME | grep -Ecx '[12]\) "[0-9]+"' || true)"
expect_line "COMMAND DOCS ping has a summary" 'summary' "$(cli COMMAND DOCS ping)"

info=$(cli INFO clients)
expect_line "INFO clients has the # Clients header" '# Clients' "$info"
expect_line "INFO clients counts this one client" 'connected_clients:1' "$info"
memory=$(cli INFO memory)
expect_line "INFO memory has deferq's resident set in used_memory" 'used_memory:[1-9][0-9]{5,}' "$memory"
expect_line "INFO memory has Redis's human form" 'used_memory_human:[0-9]+\.[0-9]{2}M' "$memory"
# redis-cli --stat reads used_memory, connected_clients, blocked_clients, total_commands_processed
# and total_connections_received from INFO: a missing field prints as --9223372036854775808.
stat=$(timeout 5 stdbuf -o0 redis-cli -p "$port" --stat -i 0.2 2>&1 | head -n 4 || true)
expect_line "redis-cli --stat shows deferq's memory and clients" \
  '0 +[0-9]+\.[0-9]{2}M +[1-9][0-9]* +0 +[0-9]+ \(\+[0-9]+\) +[1-9][0-9]* *' "$stat"
if grep -q -- '-9223372036854775808' <<<"$stat"; then
  fail "redis-cli --stat has no missing field"
  echo "    in: $stat"
else
  pass "redis-cli --stat has no missing field"
fi

# --- RESP3 ---------------------------------------------------------------------------------------
hello=$(cli -3 --no-raw HELLO 3)
expect_line "-3 HELLO 3 names the server" '1# "server" => "deferq"' "$hello"
expect_line "-3 HELLO 3 reports proto 3" '3# "proto" => \(integer\) 3' "$hello"
expect_line "-3 HELLO 3 has an id" '4# "id" => \(integer\) [0-9]+' "$hello"
expect_eq "-3 HELLO 3 lists the same keys as Redis" \
  "$(redis-cli -p "$redis_port" -3 --no-raw HELLO 3 | sed 's/ => .*//')" \
  "$(sed 's/ => .*//' <<<"$hello")"
expect_eq "-3 CLIENT GETNAME is nil" "(nil)" "$(cli -3 --no-raw CLIENT GETNAME)"

# --- commands through stdin ----------------------------------------------------------------------
piped=$(printf 'PING\nECHO piped\nCLIENT SETNAME cli-test\nCLIENT GETNAME\nSELECT 0\n' |
  redis-cli -p "$port" 2>&1 || true)
expect_eq "commands piped through stdin" $'PONG\npiped\nOK\ncli-test\nOK' "$piped"

piped_no_raw=$(printf 'ECHO "quoted arg"\nnosuch a b\nPING\n' | redis-cli -p "$port" --no-raw 2>&1 || true)
expect_eq "--no-raw commands piped through stdin" \
  $'"quoted arg"\n(error) ERR unknown command \'nosuch\', with args beginning with: \'a\' \'b\' \nPONG' \
  "$piped_no_raw"

mass=$(for ((i = 0; i < 2000; i++)); do printf '*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n' "${#i}" "$i"; done |
  redis-cli -p "$port" --pipe 2>&1 || true)
expect_line "--pipe mass insertion gets every reply" 'errors: 0, replies: 2000' "$mass"

# --- redis:// URL ---------------------------------------------------------------------------------
url_out=$(redis-cli -u "redis://orders:some-token@127.0.0.1:$port" PING 2>"$workdir/url.err" || true)
expect_eq "redis://ns:token@ URL authenticates and runs the command" "PONG" "$url_out"
if grep -q "AUTH failed" "$workdir/url.err"; then
  fail "AUTH from the URL was refused: $(cat "$workdir/url.err")"
else
  pass "AUTH from the URL accepted"
fi

# --- --no-raw output identical to Redis 7 ---------------------------------------------------------
# Shell words: quotes group an argument.
same_as_redis=(
  "PING"
  "PING msg"
  "ECHO"
  "SELECT 0"
  "SELECT 16"
  "SELECT x"
  "CLIENT GETNAME"
  "CLIENT SETNAME 'bad name'"
  "CLIENT NOSUCH"
  "HELLO 4"
  "FOO a b"
  "foo"
  "COMMAND INFO nosuchcommand"
  "COMMAND DOCS nosuchcommand"
  "QUIT"
  "EXEC"
  "DISCARD"
  "MULTI"
)
for command in "${same_as_redis[@]}"; do
  eval "words=($command)"  # constant strings above; quotes group words
  expect_eq "--no-raw $command reads as on Redis" \
    "$(redis-cli -p "$redis_port" --no-raw "${words[@]}" 2>&1 || true)" \
    "$(cli --no-raw "${words[@]}")"
done

# --- shutdown --------------------------------------------------------------------------------------
kill -TERM "$deferq_pid"
status=timeout
for ((i = 0; i < 100; i++)); do
  if ! kill -0 "$deferq_pid" 2>/dev/null; then
    status=0
    wait "$deferq_pid" || status=$?
    break
  fi
  sleep 0.05
done
expect_eq "SIGTERM stops deferq with exit code 0 within 5 s" "0" "$status"

echo "$((checks - failures))/$checks checks passed"
if ((failures > 0)); then
  echo "--- deferq log ---"
  cat "$workdir/deferq.log"
  exit 1
fi
